"""Ctrl-C and SIGTERM in the CLI's first seconds, before a run installs its own handlers.

``unstable`` installs these handlers as soon as its own code runs, before anything slow (the
command line's imports, plugin loading, the config check, building the run). Until a run takes
over (its handlers flush and close what it wrote), nothing has been written, so a stop signal
ends the process at once: one line, exit status 130 (SIGINT) or 143 (SIGTERM). The handler does
not raise: an exception raised between two bytecodes can land inside an import or a finalizer,
which swallows it or is left half done (a module half imported fails later with a NameError).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

Handlers = dict[int, Any]


def _stop(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    try:
        os.write(2, f"interrupted by {name} before the run started\n".encode())
    finally:
        os._exit(128 + signum)


def install_early_handlers() -> Handlers:
    """SIGINT and SIGTERM end the process at once (main thread only); returns the handlers they
    replaced (``restore`` puts them back)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, _stop) for signum in (signal.SIGINT, signal.SIGTERM)}


def restore(previous: Handlers) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)
