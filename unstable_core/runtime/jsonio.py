"""JSON files of a run: atomic snapshots and one-record-a-line logs."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic_core import PydanticSerializationError, to_json


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON to a temp file in the same folder, fsync, then rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=2, sort_keys=True))  # one write: json.dump writes each piece
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_line(record: Any) -> str:
    """One JSON line (with its newline). Unknown objects are written as ``str(obj)``.

    pydantic-core's serializer is 4-5x faster than ``json.dumps`` on the small records a run logs
    for every game; text it cannot encode (lone surrogates from a garbage completion) falls back
    to ``json.dumps``, which escapes them."""
    try:
        return to_json(record, fallback=str).decode() + "\n"
    except PydanticSerializationError:
        return json.dumps(record, default=str) + "\n"
