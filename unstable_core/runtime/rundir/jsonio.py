"""JSON files of a run: atomic snapshots and one-record-a-line logs."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic_core import PydanticSerializationError, to_json


def write_json_atomic(path: str | os.PathLike[str], data: Any, durable: bool = True) -> None:
    """Write JSON to a temp file in the same folder, then rename it over the target: a process
    killed at any moment leaves the old file or the new one, whole. ``durable`` also fsyncs the
    file before the rename, so that it survives a power cut or an OS crash (it costs a disk
    flush): what a resume reads needs it; a file that is only a view of state saved elsewhere
    does not."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(indented_json(data))
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def indented_json(data: Any) -> str:
    """Indented JSON, keys in their order, NaN and infinities written as ``json.dumps`` does.
    pydantic-core's serializer: ``json.dumps`` with ``indent`` runs its pure-Python encoder; text
    the serializer cannot encode (lone surrogates) goes through ``json.dumps``."""
    try:
        return to_json(data, indent=2, inf_nan_mode="constants").decode()
    except PydanticSerializationError:
        return json.dumps(data, indent=2)


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file written earlier (without ``durable``), or a folder (its entries, e.g. a
    rename in it); a missing path is skipped."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: characters pydantic-core writes as they are that Python's ``str.splitlines`` (and other
#: readers) take for line ends: escaped, so that a JSON line stays one line however it is read
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def json_line(record: Any) -> str:
    """One JSON line (with its newline). Unknown objects are written as ``str(obj)``.

    pydantic-core's serializer, for the small records a run logs for every game (cheaper than
    ``json.dumps``: docs/performance.md); text it cannot encode (lone surrogates from a garbage
    completion) falls back to ``json.dumps``, which escapes them. The Unicode line breaks a
    generated completion may hold (NEL, U+2028, U+2029) are escaped: inside JSON strings, where
    alone they can be, the escape reads back as the same text."""
    try:
        text = to_json(record, fallback=str).decode()
    except PydanticSerializationError:
        return json.dumps(record, default=str) + "\n"
    return (text.translate(_LINE_BREAKS) if not text.isascii() else text) + "\n"
