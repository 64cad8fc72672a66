"""Shows a ``DashboardState`` as records come: a live rich view on a terminal, else plain lines
(an evaluation line per evaluation, a progress line every ``every_s`` seconds of run time, and
a last line when the run ends)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

from ..progress import Task, set_sink
from .lines import end_line, eval_line, progress_line
from .state import DashboardState
from .view import render, restart_line

TICK_S = 1.0
_ENDED: set[int] = set()  # ids of the streams a presenter of plain lines wrote a run's last line to


def wrote_end(file: TextIO) -> bool:
    """Whether a presenter of plain lines (no live view) wrote a run's evaluations and its last line
    to ``file`` in this process (the CLI then does not repeat them there)."""
    return id(file) in _ENDED


def start_line(name: str, record: Mapping[str, Any]) -> str:
    """How a run began: started, resumed from step N, or started over (--resume without a snapshot)."""
    if record.get("started_over"):
        return f"[{name}] started over from its config.json (stopped before its first snapshot: nothing to go on from)"
    if record.get("resumed"):
        return f"[{name}] resumed from step {record.get('step', 0)}"
    return f"[{name}] started"


class Presenter:
    def __init__(self, *, live: bool | None = None, refresh_s: float = 0.5, every_s: float = 10.0,
                 file: TextIO | None = None) -> None:
        from rich.console import Console

        self.file = file if file is not None else sys.stderr
        self.console = Console(file=self.file)
        self.live_enabled = self.console.is_terminal if live is None else live
        self.state = DashboardState()
        self.refresh_s, self.every_s = refresh_s, every_s
        self.last_draw = 0.0
        self.last_line: float | None = None  # run time of the last progress line
        self.live: Any = None
        self.previous_sink: Any = None
        self.drawing = threading.RLock()
        if self.live_enabled:
            from rich.live import Live

            self.live = Live(console=self.console, auto_refresh=False, transient=False,
                             get_renderable=lambda: render(self.state, self.console.width))
            self.live.start()
            self.state.clock = (time.monotonic(), 0.0)
            self.previous_sink = set_sink(self.on_progress)  # set-up work shows in the header
            self.ticking = threading.Event()
            self.ticker = threading.Thread(target=self.tick, name="unstable-dashboard-clock", daemon=True)
            self.ticker.start()

    def tick(self) -> None:
        """Redraw every second, so the clocks move while no record comes (set-up, evaluations)."""
        while not self.ticking.wait(TICK_S):
            self.refresh(force=True)

    def on_progress(self, task: Task, finished: bool) -> None:
        """Set-up work (``unstable_core.progress``), from any thread."""
        self.state.setup = None if finished else task
        self.refresh(force=finished or task.done == 0)

    def add(self, record: Mapping[str, Any]) -> None:
        with self.drawing:  # never folded while the clock's thread draws the state
            self.state.add(record)
        if self.live is not None:
            if record.get("type") == "start" and (record.get("resumed") or record.get("started_over")):
                self.live.console.print(start_line(self.state.name, record))  # above the live view, kept
            self.state.clock = (time.monotonic(), self.state.time)
            self.refresh()
            return
        kind = record.get("type")
        if kind == "eval":
            self.write(eval_line(record))
        elif kind == "start":
            self.write(f"{start_line(self.state.name, record)}: {self.state.total} {self.state.unit}s in {record.get('run_dir')}")
        elif kind == "resume" and record.get("repaired"):
            for line in record["repaired"]:
                self.write(f"[{self.state.name}] resumed with a repair: {line}")
        elif kind == "restart":
            self.write(f"[{self.state.name}] {restart_line(record)}")
        elif kind == "end":
            self.write(end_line(self.state))
            _ENDED.add(id(self.file))
        elif kind in ("summary", "train") and (self.last_line is None or self.state.time - self.last_line >= self.every_s):
            if self.state.games or self.state.step:
                self.last_line = self.state.time
                self.write(progress_line(self.state))

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        with self.drawing:  # the tracker's thread, set-up work's threads and the clock all draw
            if self.live is not None and (force or now - self.last_draw >= self.refresh_s):
                self.last_draw = now
                self.live.refresh()

    def write(self, line: str) -> None:
        print(line, file=self.file, flush=True)

    def close(self) -> None:
        if self.live is not None:
            set_sink(self.previous_sink)
            self.ticking.set()
            self.ticker.join()
            with self.drawing:
                self.live.refresh()
                self.live.stop()
                self.live = None
