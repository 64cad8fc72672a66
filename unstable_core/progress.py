"""Progress of long set-up work (building a model, training a tokenizer, a warm start, loading
weights), for plugins to report::

    from unstable_core.progress import task

    with task("warm start", total=150) as t:
        for step in range(150):
            ...
            t.advance()

Where it shows: in the ``console`` tracker's live dashboard when one is up (it registers itself
with ``set_sink``), else as plain lines on stderr: one when the work starts, one every
``EVERY_S`` seconds while it goes on (done/total, rate, time left, time spent:
``warm start: 47/150 · 9.4/s · eta 0:11 · 0:05``), and one with its duration when it ends.
Thread-safe: roles are built in a worker thread.

``verbose()`` says whether third-party output (transformers' progress bars, deprecation
warnings) should be shown: ``unstable --verbose`` sets ``UNSTABLE_VERBOSE=1``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

EVERY_S = 5.0
VERBOSE_ENV = "UNSTABLE_VERBOSE"

#: (task, finished) -> None; set by a live dashboard, which shows ``task.text()``
Sink = Callable[["Task", bool], None]
_sink: Sink | None = None
_lock = threading.Lock()


def verbose() -> bool:
    """Whether third-party noise should be shown (``unstable --verbose``)."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0")


def set_sink(sink: Sink | None) -> Sink | None:
    """Send progress to ``sink`` instead of plain lines; returns the previous sink."""
    global _sink
    with _lock:
        previous, _sink = _sink, sink
    return previous


def clock(seconds: float) -> str:
    """Seconds as m:ss (h:mm:ss from an hour)."""
    h, rem = divmod(int(round(seconds)), 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Task:
    """One piece of set-up work: what it is, how far it got, and since when."""

    def __init__(self, description: str, total: int | None, plain: bool = True) -> None:
        self.description, self.total, self.plain = description, total, plain
        self.done = 0
        self.began = self.last_line = time.monotonic()

    def text(self, now: float | None = None) -> str:
        """How far it got: ``47/150 · 9.4/s · eta 0:11 · 0:05`` (rate and time left once a step is done)."""
        elapsed = (time.monotonic() if now is None else now) - self.began
        parts = [f"{self.done}/{self.total}" if self.total else str(self.done)] if self.done else []
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            parts.append(f"{rate:.2f}/s" if rate < 10 else f"{rate:.1f}/s" if rate < 100 else f"{rate:,.0f}/s")
            if self.total:
                parts.append(f"eta {clock(max(self.total - self.done, 0) / rate)}")
        return " · ".join([*parts, clock(elapsed)])

    def _emit(self, finished: bool) -> None:
        with _lock:
            sink = _sink
        if sink is not None:
            sink(self, finished)
            return
        if not self.plain:
            return
        now = time.monotonic()
        if finished:
            line = f"{self.description}: done in {now - self.began:.1f} s"
        elif self.done == 0:
            line = f"{self.description} ..."
        elif now - self.last_line >= EVERY_S:
            line = f"{self.description}: {self.text(now)}"
        else:
            return
        self.last_line = now
        print(f"unstable: {line}", file=sys.stderr, flush=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._emit(False)


@contextmanager
def task(description: str, total: int | None = None, plain: bool = True) -> Iterator[Task]:
    """Report the progress of one piece of set-up work (see the module's docstring);
    ``plain=False``: to a live dashboard only, no lines on stderr."""
    t = Task(description, total, plain)
    t._emit(False)
    try:
        yield t
    finally:
        t._emit(True)
