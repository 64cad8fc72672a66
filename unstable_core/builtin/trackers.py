"""Trackers `jsonl` (run_dir/metrics.jsonl) and `console` (the live dashboard).

Each receives the typed records of ``unstable_core.records``: ``train`` (one per learner
update), ``eval`` (one per evaluation (step, env, model, opponent)), ``eval_skipped``,
``summary`` (every second: games, games/s, failures, buffer fill and per-(mode, env) totals under
``envs``), ``ratings``, and ``game`` (one per game) for trackers whose record declares
``game_records`` (``jsonl`` with ``games = true``).
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import hookimpl
from ..components import TrackerSpec
from ..records import Record
from ..runtime.rundir.jsonio import json_line


class JsonlOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filename: str = Field("metrics.jsonl", description="File name inside the run directory (a name, not a path).")

    @field_validator("filename")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or v in (".", "..") or "/" in v or "\\" in v or "\x00" in v or os.path.isabs(v):
            raise ValueError("must be a plain file name inside the run directory, without a path")
        return v
    games: bool = Field(
        False, description="Also log one `game` record per game (summary records carry per-env totals either way)."
    )
    flush_s: float = Field(1.0, ge=0, description="Seconds between flushes of game records (other records flush at once).")


class JsonlTracker:
    def __init__(self, options: JsonlOptions, run_dir: str | None) -> None:
        if not run_dir:
            raise ValueError("the jsonl tracker needs a run directory")
        self.path = os.path.join(run_dir, options.filename)
        self.flush_s = options.flush_s
        try:  # never through a symbolic link: the run's files are written in its directory only
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            reason = "it is a symbolic link" if os.path.islink(self.path) else exc.strerror
            raise ValueError(f"{self.path}: cannot be written ({reason})") from None
        self.fh = open(fd, "a", encoding="utf-8")
        self.last_flush = time.monotonic()
        self.digest = hashlib.sha256()  # of every byte written: a snapshot records it, a resume checks it

    def log(self, record: Record) -> None:
        kind = record.type
        line = json_line(record.model_dump(mode="json"))
        self.fh.write(line)
        self.digest.update(line.encode("utf-8"))
        now = time.monotonic()
        # game records are many: flush them at most every flush_s; anything else at once
        if kind != "game" or now - self.last_flush >= self.flush_s:
            self.fh.flush()
            self.last_flush = now

    def close(self) -> None:
        if not self.fh.closed:  # flushed by closing; fsynced only for a snapshot (state_dict), as resume reads it
            self.fh.close()

    def state_dict(self) -> dict[str, Any]:
        """How much of the file the snapshot covers, and the SHA-256 of those bytes: on resume,
        what was written later goes, and what it covers must be what was written."""
        self.fh.flush()
        os.fsync(self.fh.fileno())
        return {"offset": self.fh.tell(), "sha256": self.digest.hexdigest()}

    def load_state_dict(self, state: dict[str, Any], repair: bool = False) -> None:
        """Cut the log back to what the snapshot covers, after checking that those bytes are
        what was written. ``repair`` (``unstable run --resume RUN_DIR --repair``): go on with a
        damaged log instead of refusing it, saying what was repaired in ``repaired``."""
        self.fh.flush()
        self.repaired: str | None = None
        offset, size = int(state["offset"]), os.fstat(self.fh.fileno()).st_size
        name = os.path.basename(self.path)
        if size < offset:  # deleted (and now made anew) or cut: the records before the snapshot are gone
            if not repair:
                raise ValueError(f"{self.path} holds {size} bytes, fewer than the {offset} the snapshot covers: the log was cut "
                                 f"or deleted; put it back, or go on with what is left (--repair)")
            with open(self.path, "rb") as f:
                kept = f.read()
            kept = kept[: kept.rfind(b"\n") + 1]  # its complete lines
            os.ftruncate(self.fh.fileno(), len(kept))
            self.digest = hashlib.sha256(kept)
            self.repaired = f"{name} held {size} of the {offset} bytes the snapshot covers: its {len(kept)} bytes of complete lines kept"
            return
        digest = hashlib.sha256()
        with open(self.path, "rb") as f:  # the file itself, not a link (opened with O_NOFOLLOW)
            left = offset
            while left and (chunk := f.read(min(left, 1 << 20))):
                digest.update(chunk)
                left -= len(chunk)
        if "sha256" in state and digest.hexdigest() != state["sha256"]:  # snapshots before 2026-11-26 have none
            if not repair:
                raise ValueError(f"{self.path}: its first {offset} bytes are not what the snapshot recorded (SHA-256 differs): "
                                 "the log was edited or replaced; put it back, or go on with it as it is (--repair)")
            self.repaired = f"{name}: its first {offset} bytes differ from what was written (SHA-256): kept as they are"
        os.ftruncate(self.fh.fileno(), offset)  # opened for appending: writes go on from there
        self.digest = digest


class ConsoleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    refresh_s: float = Field(0.5, gt=0, description="Seconds between redraws of the live view.")
    live: bool | None = Field(None, description="Live view (True), plain lines (False), or live only on a terminal (None).")
    every_s: float = Field(10.0, gt=0, description="Plain lines: seconds of run time between progress lines.")


class ConsoleTracker:
    """The live dashboard (``unstable_core.dashboard``) on stderr: progress with ETA, throughput,
    learner figures, per-env collection stats, the latest evaluations, ratings, match heatmap and
    failures. Not on a terminal: plain lines."""

    def __init__(self, options: ConsoleOptions) -> None:
        from ..dashboard.present import Presenter

        self.presenter = Presenter(live=options.live, refresh_s=options.refresh_s, every_s=options.every_s)

    def log(self, record: Record) -> None:
        self.presenter.add(record.model_dump(mode="json"))

    def close(self) -> None:
        self.presenter.close()


@hookimpl
def unstable_trackers() -> list[TrackerSpec]:
    return [
        TrackerSpec(name="jsonl", summary="Append records to run_dir/metrics.jsonl", config=JsonlOptions, game_records="games",
                    factory=lambda o, ctx: JsonlTracker(o, ctx.run_dir)),
        TrackerSpec(name="console", summary="Live dashboard: progress, throughput, evaluations, ratings, matches", config=ConsoleOptions, factory=lambda o,
            ctx: ConsoleTracker(o)),
    ]
