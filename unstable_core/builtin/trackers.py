"""Trackers `jsonl` (run_dir/metrics.jsonl) and `console` (a rich live view).

Each receives the typed records of ``unstable_core.records``: ``train`` (one per learner
update), ``eval`` (one per evaluation (step, env, model, opponent)), ``eval_skipped``,
``summary`` (every second: games, games/s, failures, buffer fill and per-(mode, env) totals under
``envs``), ``ratings``, and ``game`` (one per game) for trackers whose ``wants_game_records`` is
true (``jsonl`` with ``games = true``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import hookimpl
from ..components import TrackerSpec
from ..records import Record
from ..runtime.jsonio import json_line


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
        self.wants_game_records = options.games
        self.flush_s = options.flush_s
        self.fh = open(self.path, "a", encoding="utf-8")
        self.last_flush = time.monotonic()

    def log(self, record: Record) -> None:
        kind = record.type
        self.fh.write(json_line(record.model_dump(mode="json")))
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

    def state_dict(self) -> dict[str, Any]:
        """How much of the file the snapshot covers: on resume, what was written later goes."""
        self.fh.flush()
        os.fsync(self.fh.fileno())
        return {"offset": self.fh.tell()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.fh.flush()
        os.truncate(self.path, state["offset"])  # opened for appending: writes go on from there


class ConsoleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    refresh_s: float = Field(0.5, gt=0, description="Seconds between redraws of the live view.")
    live: bool | None = Field(None, description="Live view (True), plain lines (False), or live only on a terminal (None).")


class ConsoleTracker:
    """games/s, buffer fill, learner step and, per (mode, env): win/draw/loss and invalid-move
    rates of the anchor seat (from the summary records), and the latest evaluation."""

    def __init__(self, options: ConsoleOptions) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.refresh_s = options.refresh_s
        self.wants_game_records = False
        self.live_enabled = self.console.is_terminal if options.live is None else options.live
        self.last_draw = 0.0
        self.games = 0
        self.games_per_s = 0.0
        self.failed = 0
        self.step = 0
        self.buffer = (0, 0)
        self.envs: dict[str, dict[str, dict[str, float]]] = {}
        self.last_eval: list[dict[str, Any]] = []
        self.live = None
        if self.live_enabled:
            from rich.live import Live

            self.live = Live(self._table(), console=self.console, auto_refresh=False, transient=False)
            self.live.start()

    def log(self, record: Record) -> None:
        kind = record.type
        if kind == "summary":
            self.games = record.games
            self.games_per_s = record.games_per_s
            self.failed = record.failed
            self.buffer = (record.buffer_size, record.buffer_capacity)
            self.envs = {mode: {env: t.model_dump() for env, t in per.items()} for mode, per in record.envs.items()}
        elif kind == "train":
            self.step = record.step
        elif kind == "eval":
            self.last_eval = [r for r in self.last_eval if r["step"] == record.step] + [record.model_dump()]
            if not self.live_enabled:
                self.console.print(
                    f"eval step {record.step} {record.env_id} {record.model} vs {record.opponent}: "
                    f"win {record.win_rate:.2f} draw {record.draw_rate:.2f} loss {record.loss_rate:.2f} "
                    f"invalid {record.invalid_rate:.2f} ({record.games} games)", soft_wrap=True
                )
        now = time.monotonic()
        if self.live is not None and now - self.last_draw >= self.refresh_s:
            self.last_draw = now
            self.live.update(self._table(), refresh=True)

    def _table(self) -> Any:
        from rich.table import Table

        t = Table(title=f"unstable | {self.games} games ({self.games_per_s:.1f}/s) | failed {self.failed} | "
                  f"step {self.step} | buffer {self.buffer[0]}/{self.buffer[1]}")
        for col in ("env", "games", "win", "draw", "loss", "invalid"):
            t.add_column(col, justify="right" if col != "env" else "left")
        for mode, per_env in sorted(self.envs.items()):
            for env_id, r in sorted(per_env.items()):
                t.add_row(f"{mode} {env_id}", str(int(r["games"])),
                          *(f"{r[k]:.2f}" for k in ("win_rate", "draw_rate", "loss_rate", "invalid_rate")))
        for r in self.last_eval:
            t.add_row(f"eval@{r['step']} {r['env_id']} {r['model']} vs {r['opponent']}", str(r["games"]),
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
