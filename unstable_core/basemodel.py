"""``Model``, the base of every unstable type, and ``trusted``: building an instance without
validation, for the core's hot paths (the game runner, the scheduler, the scripted agents).

Everything else in this module is its own business."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict


class lazy_property(cached_property):  # type: ignore[type-arg,unused-ignore]
    """``functools.cached_property`` without the lock that Python 3.11 takes on every first access
    (3.12 dropped it; results are made and read in one thread)."""

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.attrname] = self.func(instance)  # later reads find it there
        return value


class Model(BaseModel):
    """Base of every unstable type: strict about unknown fields, built on first use."""

    model_config = ConfigDict(extra="forbid", defer_build=True, ignored_types=(lazy_property,))

    def __reduce__(self) -> Any:
        """Pickled as its field values and rebuilt without validation (they were valid when
        pickled, and pydantic's own ``__setstate__`` does not validate either): results cross a
        process boundary for every game under a distributed executor (docs/performance.md)."""
        return (_unpickle, (type(self), self.__dict__, self.__pydantic_fields_set__, self.__pydantic_private__))

    @classmethod
    def of(cls, data: dict[str, Any]) -> Self:
        """``cls(**data)``: the same validation and the same object, without ``BaseModel.__init__``'s
        Python-level wrapper. For code that builds many objects from dicts, as the game runner does."""
        return cls.__pydantic_validator__.validate_python(data)


M = TypeVar("M", bound=Model)
_new = object.__new__
# BaseModel's slots, set through their descriptors: object.__setattr__ looks each one up again
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_ALL_FIELDS: dict[type, set[str]] = {}  # trusted(): a class's field names, shared by its instances


def trusted(cls: type[M], data: dict[str, Any]) -> M:
    """An instance of ``cls`` holding ``data`` as it is, without validation: what pydantic's
    ``model_construct`` does, minus its per-field alias and default handling (the figures are
    in docs/performance.md).

    Core-internal, for the game runner's hot path: ``data`` must name every field, each with a
    value of the field's exact type, built by the core from values that were already validated or
    type-checked (a component's value of any other type goes through ``Model.of`` instead).
    ``tests/test_runner_build.py`` checks that what the runner builds this way equals its
    validated copy.

    Every field is set, so the instances of a class share one set of its field names as their
    ``model_fields_set``: pydantic only ever adds a field's name to it (on assignment), which it
    already holds, and copies get sets of their own."""
    fields = _ALL_FIELDS.get(cls)
    if fields is None:
        fields = _ALL_FIELDS[cls] = set(cls.model_fields)
    return _unpickle(cls, data, fields, None)


def _unpickle(cls: type[M], data: dict[str, Any], fields_set: set[str], private: dict[str, Any] | None) -> M:
    """An instance of ``cls`` holding ``data`` as it is (pickled objects, ``trusted``)."""
    m = _new(cls)
    _set_dict(m, data)
    _set_fields_set(m, fields_set)
    _set_extra(m, None)
    _set_private(m, private)
    return m


__all__ = ["Model", "lazy_property", "trusted"]
