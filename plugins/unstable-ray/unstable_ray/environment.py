"""The environment variables the `ray` executor reads or sets; no Ray import here, since importing
Ray with a malformed ``RAY_*`` setting crashes the process (a segfault in Ray's config parsing)."""

from __future__ import annotations

import os

from unstable_core import RunFailed

#: the Ray setting ``prepare_local_cluster`` gives a local cluster
INLINE_RESULT_VAR = "RAY_max_direct_call_object_size"


def check_environment() -> None:
    """Fail with one line, before Ray is imported, on a value of ours Ray cannot parse."""
    value = os.environ.get(INLINE_RESULT_VAR)
    if value is not None and not value.strip().isdigit():
        raise RunFailed(f"ray executor: {INLINE_RESULT_VAR}={value!r} is not a number of bytes; unset it or give one")


def prepare_local_cluster() -> None:
    """Settings for a local Ray cluster about to be started in this process, as environment
    variables its processes inherit (one already set wins): a call's result of up to 4 MiB (a
    batch of 32 scripted games is ~420 KB) goes straight back to the caller instead of through the
    node's object store (Ray's default limit: 100 KiB), and two scripted rollout replicas play
    ~17 % more games/s (docs/ray.md). A cluster started by hand takes the same variable."""
    os.environ.setdefault(INLINE_RESULT_VAR, str(4 * 1024 * 1024))


def quiet_ray() -> None:
    """Ray's driver prints what the raylet reports (a worker that died: a paragraph of causes) to
    the console whatever ``log_to_driver`` says; the executor says it in one line instead
    (``report_restart``), so without ``--verbose`` these go to the ``ray`` logger at debug level.
    Ray's private printing function is wrapped when it is there; if Ray moves it, nothing changes."""
    import logging

    from ray._private import worker

    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "unstable_quiet", False):
        return

    def print_to_stdstream(data: dict, ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            for line in data.get("lines", []):
                logging.getLogger("ray").debug("(raylet) %s", line)
            return
        printer(data, ignore_prefix)

    print_to_stdstream.unstable_quiet = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream
