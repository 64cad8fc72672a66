"""Ctrl-C and SIGTERM at any moment of a run's first seconds: exit 130 / 143, one line, no stray
traceback, the files a run wrote readable (``unstable_core/interrupts.py``)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the child's signal mask in /proc")


def start(run_dir):
    return subprocess.Popen(
        [sys.executable, "-c", "from unstable_core.entry import main; main()", "run", "examples/tournament.toml",
         "--run-dir", str(run_dir), "--set", "collection.tournament_games=1000000"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        # both at their defaults in the child: a shell in the background starts children ignoring SIGINT
        preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)],
    )


def wait_until_handled(proc, timeout=60.0):
    """Return once ``proc`` catches SIGTERM (its handler is in place: the SigCgt mask of
    /proc/PID/status), or has exited."""
    bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            fields = dict(line.split(":", 1) for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines())
        except (FileNotFoundError, ProcessLookupError):  # exited between the poll and the read
            return
        if int(fields["SigCgt"].strip(), 16) & bit:
            return
        time.sleep(0.002)
    assert proc.poll() is not None, f"the run did not install its signal handlers in {timeout:.0f} s"


def check_files(run_dir):
    """Whatever the run wrote before it stopped is whole: every record line and JSON file parses."""
    if not run_dir.exists():
        return
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            json.loads(line)
    for name in ("registry.json", "config.json", "plugins.json"):
        if (run_dir / name).exists():
            json.loads((run_dir / name).read_text())


def test_a_stop_signal_in_the_first_seconds_ends_the_run_cleanly(tmp_path):
    """40 trials, two runs at a time (each loads the other's machine), signalled at points spread
    over the first 3 seconds (the command line's imports, plugin loading, the config check,
    building the roles, the first games), then 4 later ones. The console script's entry point
    (``unstable_core.entry``) handles signals from its first line; the interpreter's own start
    before it (about 0.05 s on an idle machine, more on a busy one) is the window the test leaves
    out: the delays count from the moment the child catches SIGTERM."""
    delays = [2.85 * i / 19 for i in range(20)] + [3.35, 3.85]
    failures = []
    for i, delay in enumerate(delays):
        pair = [(signal.SIGINT, tmp_path / f"int-{i}"), (signal.SIGTERM, tmp_path / f"term-{i}")]
        procs = [(signum, run_dir, start(run_dir)) for signum, run_dir in pair]
        try:
            for _, _, proc in procs:
                wait_until_handled(proc)
            time.sleep(delay)
            for signum, _, proc in procs:
                proc.send_signal(signum)
            for signum, run_dir, proc in procs:
                _, err = proc.communicate(timeout=90)
                stray = "Traceback" in err or "Exception ignored" in err
                if proc.returncode != EXIT[signum] or stray:
                    failures.append(f"{signum.name} at {delay:.2f} s: exit {proc.returncode}, stderr {err[-400:]!r}")
                check_files(run_dir)
        finally:
            for _, _, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    assert not failures, "\n".join(failures)
