"""``unstable watch RUN_DIR``: the dashboard of a run in progress elsewhere, from the run
directory's ``metrics.jsonl`` (written by the ``jsonl`` tracker), refreshed until the run's
``end`` record. A resumed run cuts its log back to its snapshot: the watcher then reads it again
from the start."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ..errors import UnstableError
from .present import Presenter
from .state import DashboardState
from .view import render

METRICS = "metrics.jsonl"
ENDED = ("completed", "interrupted", "failed")


class MetricsFollower:
    """Reads the complete lines a growing ``metrics.jsonl`` gained since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> tuple[list[dict], bool]:
        """(new records, whether the file was cut back so that reading starts over)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return [], False
        restarted = size < self.offset
        if restarted:
            self.offset, self.partial = 0, b""
        if size == self.offset:
            return [], restarted
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            data = self.partial + fh.read(size - self.offset)
        self.offset = size
        *lines, self.partial = data.split(b"\n")
        records = []
        for line in lines:
            if line.strip():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut by a crash, or not text: the rest of the log is still worth showing
                if isinstance(record, dict):  # anything else is no record
                    records.append(record)
        return records, restarted


def fold(add: Callable[[dict[str, Any]], None], record: dict[str, Any]) -> None:
    """Fold one record read from a file another process (or a person) wrote: a record whose
    fields have the wrong types (a ``time`` that is no number) is skipped, not fatal."""
    try:
        add(record)
    except (KeyError, TypeError, ValueError, AttributeError):
        pass


def check_logs_metrics(directory: Path) -> None:
    """Raise unless ``directory`` holds a run that writes ``metrics.jsonl`` (which a run
    without the ``jsonl`` tracker never does: watching it would wait forever)."""
    try:
        config = json.loads((directory / "config.json").read_text())["config"]
    except FileNotFoundError:
        raise UnstableError(f"{directory} holds no run (no {METRICS} or config.json)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnstableError(f"{directory / 'config.json'}: unreadable ({exc})") from None
    trackers = [t for t in config.get("trackers") or [] if isinstance(t, dict)]
    if not any(t.get("name") == "jsonl" and t.get("filename", METRICS) == METRICS for t in trackers):
        names = ", ".join(str(t.get("name")) for t in trackers) or "none"
        raise UnstableError(f"the run in {directory} writes no {METRICS} (its trackers: {names}); "
                            'unstable watch needs [[trackers]] name = "jsonl"')


def watch(run_dir: str, *, refresh_s: float = 1.0, once: bool = False, live: bool | None = None,
          file: TextIO | None = None) -> str:
    """Show the run's dashboard until its ``end`` record; with ``once``, print the dashboard as
    it stands and return. Returns the run's status as the records tell it."""
    directory = Path(run_dir)
    if not directory.is_dir():
        raise UnstableError(f"{run_dir}: no such run directory")
    path = directory / METRICS
    if not path.exists():
        check_logs_metrics(directory)
    follower = MetricsFollower(path)
    if once:
        from rich.console import Console

        state = DashboardState()
        for record in follower.read()[0]:
            fold(state.add, record)
        console = Console(file=file)
        console.print(render(state, console.width))
        return state.status
    presenter = Presenter(live=live, refresh_s=float("inf"), file=file)  # redrawn once per read, below
    try:
        while True:
            records, restarted = follower.read()
            if restarted:
                presenter.state = DashboardState()
            for record in records:
                fold(presenter.add, record)
            presenter.refresh(force=True)
            if presenter.state.status in ENDED:
                break
            time.sleep(refresh_s)  # polling a file that another process writes
    finally:
        presenter.close()
    return presenter.state.status
