"""Reading a run config: TOML files, ``--set`` overrides, a bound on nesting, and validation
errors as one line per problem naming the key (``config.py`` validates what is read here)."""

from __future__ import annotations

import copy
import difflib
import os
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import ConfigError

MAX_NESTING = 64  # tables and lists in a config or an override nest at most this deep


def _type_name(value: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )


#: the error type of a validator that must not echo its input (``PydanticCustomError(SECRET_ERROR, msg)``)
SECRET_ERROR = "unstable_secret"


def _nested_model(model: type[BaseModel], path: Sequence[Any]) -> type[BaseModel] | None:
    """The pydantic model at ``path`` inside ``model`` (a field whose type is a model), if any."""
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def format_validation_error(exc: ValidationError, source: str, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """One line per problem: ``source: key.path: what was expected (found ...)``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (prefix.split(".") if prefix else []) + list(err["loc"]))
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1]) if err["loc"] else "?"
            hint = ""
            target = _nested_model(model, err["loc"][:-1]) if model is not None else None
            if target is not None:
                close = difflib.get_close_matches(key, list(target.model_fields), n=1)
                if close:
                    hint = f"; did you mean {close[0]!r}?"
            lines.append(f"{source}: {loc}: unknown option{hint}")
            continue
        where = f"{loc}: " if loc else ""
        found = err.get("input")
        # a value that may be a secret (an API key where its variable's name belongs) is never shown
        found_s = "" if err["type"] in ("missing", SECRET_ERROR) else f" (found {found!r}, {_type_name(found)})"
        msg = err["msg"]
        lines.append(f"{source}: {where}{msg[:1].lower()}{msg[1:]}{found_s}")
    return "\n".join(lines)


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """How deep tables and lists nest in ``value`` (counted up to ``limit + 1``)."""
    depth, level = 0, [value]
    while level and depth <= limit:
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
        depth += 1 if level else 0
    return depth


def _parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise ConfigError(f"{where}: tables or lists nest too deeply (at most {MAX_NESTING} levels)") from None
    if nesting_depth(data) > MAX_NESTING:
        raise ConfigError(f"{where}: tables or lists nest too deeply (at most {MAX_NESTING} levels)")
    return data


def parse_value(text: str) -> Any:
    """Parse an override's value as a TOML value; fall back to the plain string."""
    try:
        return _parse_toml(f"v = {text}", f"--set value {text[:40]!r}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def override_list(overrides: Iterable[str] | None) -> list[str]:
    """``overrides`` as a list of strings (None: none); anything else is a ConfigError."""
    if overrides is None:
        return []
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Iterable):
        raise ConfigError(f"overrides must be a list of 'KEY=VALUE' strings, not {_type_name(overrides)}")
    items = list(overrides)
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"overrides must be 'KEY=VALUE' strings; found {item!r} ({_type_name(item)})")
    return items


def apply_overrides(data: dict[str, Any], overrides: Iterable[str] | None) -> dict[str, Any]:
    """Apply ``a.b=c`` overrides to a config dict (integers index lists: ``train_envs.0.env_id``)."""
    overrides = override_list(overrides)
    if nesting_depth(data) > MAX_NESTING:
        raise ConfigError(f"the config's tables or lists nest too deeply (at most {MAX_NESTING} levels)")
    data = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set training.learning_steps=10")
        key, _, raw = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set {item!r}: empty key")
        if len(parts) > MAX_NESTING:
            raise ConfigError(f"--set {key[:60]}...: the key nests {len(parts)} levels deep (at most {MAX_NESTING})")
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(f"--set {key}: {'.'.join(parts[:i + 1])} is not an index of a {len(node)}-item list")
                node = node[int(part)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i])} is {_type_name(node)}, not a table")
        last = parts[-1]
        value = parse_value(raw.strip())
        if isinstance(node, list):
            if not last.isdigit() or int(last) >= len(node):
                raise ConfigError(f"--set {key}: {last!r} is not an index of a {len(node)}-item list")
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(f"--set {key}: {'.'.join(parts[:-1])} is {_type_name(node)}, not a table")
    return data


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        return _parse_toml(p.read_text(encoding="utf-8"), str(path))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: the file is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
