"""Reading back an offline W&B run (``mode = "offline"``): what was logged, without a server.

wandb writes an offline run to ``DIR/wandb/offline-run-<time>-<id>/run-<id>.wandb``: a LevelDB-style
log (a 7-byte file header, then 32 KiB blocks of records, each with a 7-byte header: CRC32,
length, type FULL/FIRST/MIDDLE/LAST) of protobuf ``Record`` messages. ``read_offline_runs``
decodes the history rows, the config, the summary and the exit code of each such run.

The file is complete once wandb's service has written it out: when the process that logged the run
has ended, or after ``wandb.teardown()``. ``run.finish()`` alone returns before that, so a file
read right after it may lack records.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = 7  # the file's (":W&B" + magic + version) and each record's (crc32, length, type)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    path: Path
    run_id: str = ""
    project: str = ""
    display_name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None

    def series(self, key: str) -> list[tuple[dict[str, Any], Any]]:
        """(row, value) for every history row that holds ``key``."""
        return [(row, row[key]) for row in self.history if key in row]


def records(path: str | Path) -> list[bytes]:
    """The raw records of one ``.wandb`` file."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    out, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
            pending = b""
    return out


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(path: str | Path) -> OfflineRun:
    """Decode one ``run-<id>.wandb`` file."""
    from wandb.proto import wandb_internal_pb2 as pb

    run = OfflineRun(path=Path(path))
    for raw in records(path):
        rec = pb.Record()  # type: ignore[attr-defined]  # generated protobuf: its stubs omit the messages
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            run.history.append({_key(i): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "run":
            run.run_id, run.project, run.display_name = rec.run.run_id, rec.run.project, rec.run.display_name
            run.config.update({_key(i): json.loads(i.value_json) for i in rec.run.config.update})
        elif kind == "config":
            run.config.update({_key(i): json.loads(i.value_json) for i in rec.config.update})
        elif kind == "summary":
            run.summary.update({_key(i): json.loads(i.value_json) for i in rec.summary.update})
        elif kind == "exit":
            run.exit_code = rec.exit.exit_code
    return run


def read_offline_runs(directory: str | Path) -> list[OfflineRun]:
    """Every offline run under ``directory`` (the tracker's ``dir``: by default the run
    directory), oldest first; a resumed run adds one folder with the same run id."""
    files = sorted(Path(directory).glob("wandb/offline-run-*/run-*.wandb"))
    return [read_offline_run(f) for f in files]
