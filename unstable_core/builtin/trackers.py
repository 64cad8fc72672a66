"""Trackers `jsonl` (run_dir/metrics.jsonl) and `console` (a rich live view).

Records are dicts with a ``type``: ``game`` (one per game), ``train`` (one per learner update),
``eval`` (one per evaluation (step, env, opponent)), ``ratings`` and ``summary``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import hookimpl
from ..components import TrackerSpec


class JsonlOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    filename: str = Field("metrics.jsonl", description="File name inside the run directory.")
    games: bool = Field(True, description="Also log one `game` record per game.")
    flush_s: float = Field(1.0, ge=0, description="Seconds between flushes of game records (other records flush at once).")


class JsonlTracker:
    def __init__(self, options: JsonlOptions, run_dir: str | None) -> None:
        if not run_dir:
            raise ValueError("the jsonl tracker needs a run directory")
        self.path = os.path.join(run_dir, options.filename)
        self.games = options.games
        self.flush_s = options.flush_s
        self.fh = open(self.path, "a", encoding="utf-8")
        self.last_flush = time.monotonic()

    def log(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind == "game" and not self.games:
            return
        self.fh.write(json.dumps(record, default=str) + "\n")
        now = time.monotonic()
        # game records are many: flush them at most every flush_s; anything else at once
        if kind != "game" or now - self.last_flush >= self.flush_s:
            self.fh.flush()
            self.last_flush = now

    def close(self) -> None:
        if not self.fh.closed:
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()


class ConsoleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    refresh_s: float = Field(0.5, gt=0, description="Seconds between redraws of the live view.")
    live: bool | None = Field(None, description="Live view (True), plain lines (False), or live only on a terminal (None).")


class ConsoleTracker:
    """games/s, buffer fill, learner step and, per env: win/draw/loss and invalid-move rates."""

    def __init__(self, options: ConsoleOptions) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.refresh_s = options.refresh_s
        self.live_enabled = self.console.is_terminal if options.live is None else options.live
        self.start = time.monotonic()
        self.last_draw = 0.0
        self.games = 0
        self.failed = 0
        self.step = 0
        self.buffer = (0, 0)
        self.per_env: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.last_eval: list[dict[str, Any]] = []
        self.live = None
        if self.live_enabled:
            from rich.live import Live

            self.live = Live(self._table(), console=self.console, auto_refresh=False, transient=False)
            self.live.start()

    def log(self, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if kind == "game":
            self.games += 1
            if record.get("outcome") == "failed":
                self.failed += 1
            env = self.per_env[record.get("env_id", "?")]
            env["games"] += 1
            for o in ("win", "draw", "loss"):
                env[o] += record.get("anchor_outcome") == o
            env["invalid"] += bool(record.get("invalid"))
        elif kind == "train":
            self.step = int(record.get("step", self.step))
        elif kind == "summary":
            self.buffer = (int(record.get("buffer_size", 0)), int(record.get("buffer_capacity", 0)))
        elif kind == "eval":
            self.last_eval = [r for r in self.last_eval if r.get("step") == record.get("step")] + [record]
            if not self.live_enabled:
                self.console.print(
                    f"eval step {record['step']} {record['env_id']} {record.get('model', '')} vs {record['opponent']}: "
                    f"win {record['win_rate']:.2f} draw {record['draw_rate']:.2f} loss {record['loss_rate']:.2f} "
                    f"invalid {record['invalid_rate']:.2f} ({record['games']} games)"
                )
        now = time.monotonic()
        if self.live is not None and now - self.last_draw >= self.refresh_s:
            self.last_draw = now
            self.live.update(self._table(), refresh=True)

    def _table(self) -> Any:
        from rich.table import Table

        elapsed = max(time.monotonic() - self.start, 1e-9)
        t = Table(title=f"unstable | {self.games} games ({self.games / elapsed:.1f}/s) | failed {self.failed} | "
                  f"step {self.step} | buffer {self.buffer[0]}/{self.buffer[1]}")
        for col in ("env", "games", "win", "draw", "loss", "invalid"):
            t.add_column(col, justify="right" if col != "env" else "left")
        for env_id, s in sorted(self.per_env.items()):
            n = max(s["games"], 1)
            t.add_row(env_id, str(int(s["games"])), *(f"{s[k] / n:.2f}" for k in ("win", "draw", "loss", "invalid")))
        for r in self.last_eval:
            t.add_row(f"eval@{r['step']} {r['env_id']} vs {r['opponent']}", str(r["games"]),
                      *(f"{r[k]:.2f}" for k in ("win_rate", "draw_rate", "loss_rate", "invalid_rate")))
        return t

    def close(self) -> None:
        if self.live is not None:
            self.live.update(self._table(), refresh=True)
            self.live.stop()
            self.live = None
        elif self.games:
            print(f"unstable: {self.games} games, {self.failed} failed, {self.step} learner steps", file=sys.stderr)


@hookimpl
def unstable_trackers() -> list[TrackerSpec]:
    return [
        TrackerSpec(name="jsonl", summary="Append records to run_dir/metrics.jsonl", config=JsonlOptions, factory=lambda o, ctx: JsonlTracker(o, ctx.run_dir)),
        TrackerSpec(name="console", summary="Rich live view: games/s, buffer, win/draw/loss, invalid moves", config=ConsoleOptions, factory=lambda o, ctx: ConsoleTracker(o)),
    ]
