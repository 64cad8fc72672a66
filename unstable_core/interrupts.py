"""Ctrl-C and SIGTERM in the CLI's first seconds, before a run installs its own handlers.

``unstable`` installs these handlers as soon as its own code runs, before anything slow (plugin
imports, loading the config, building the run): a signal then raises ``EarlyInterrupt`` (a
``BaseException``, so that no ``except Exception`` on the way, a plugin loader's say, takes it for
a failure), which the CLI turns into one line and exit status 130 (SIGINT) or 143 (SIGTERM). The
signal is also remembered in ``pending``: where a finalizer swallowed the exception (Python
prints "Exception ignored" and goes on), the run stops as it starts, before it writes anything.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

#: the signal that arrived before a run's own handlers took over, if one did
pending: int | None = None


class EarlyInterrupt(BaseException):
    """A stop signal before the run started."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name} before the run started")


def _early(signum: int, frame: Any) -> None:
    global pending
    pending = signum
    raise EarlyInterrupt(signum)


def install_early_handlers() -> None:
    """SIGINT and SIGTERM raise ``EarlyInterrupt`` (main thread only); one that a finalizer
    swallows is not printed as "Exception ignored" (``pending`` stops the run instead)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _early)
    previous = sys.unraisablehook

    def quiet(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, EarlyInterrupt):
            previous(unraisable)

    sys.unraisablehook = quiet
