"""How a role call's arguments and result cross a process boundary.

Ray pickles what it sends with cloudpickle, whose pure-Python hook runs for every object: on a
batch of game results (tens of small models a game) that costs more than the C pickler's whole
job. So a call's arguments and its result travel as one ``Packed`` blob that the standard
``pickle`` made (two scripted rollout replicas went from 1.04 to 1.20 x the local executor's
games/s: docs/ray.md). What the standard pickler cannot carry (a closure, a class defined in
``__main__``) is handed to Ray as it is.
"""

from __future__ import annotations

import pickle
from typing import Any


class Packed:
    """A value pickled by the standard ``pickle``; Ray carries its bytes without looking inside."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, ...]:
        return Packed, (self.data,)


def pack(value: Any) -> Any:
    """``value`` as a ``Packed`` blob, or itself where only cloudpickle can pickle it."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a closure, a local class: cloudpickle pickles it by value
        return value
    if b"__main__" in data:  # pickled by reference to a module the other process does not have
        return value
    return Packed(data)


def unpack(value: Any) -> Any:
    """What ``pack`` was given."""
    return pickle.loads(value.data) if isinstance(value, Packed) else value


def without_specs(results: list[Any]) -> list[Any]:
    """Game results less what the driver already has: each game's spec and its seats' model refs
    (a fifth of a scripted game's pickling). ``with_specs`` puts them back."""
    for result in results:
        result.game = None
        for trajectory in result.trajectories:
            trajectory.model = None
    return results


def with_specs(results: list[Any], specs: list[Any]) -> list[Any]:
    """``results`` (played from ``specs``, in their order) with their specs and seats again."""
    for spec, result in zip(specs, results, strict=True):
        result.game = spec
        for trajectory in result.trajectories:
            trajectory.model = spec.seats[trajectory.player_id]
    return results
