"""Kill-and-resume harness: a run in a child process, SIGKILLed at random points of its progress
and resumed from its latest snapshot, for tests of the resume contract (docs/resume.md).

    from unstable_core.testing import run_with_kills

    landed = run_with_kills(run_dir, config, random.Random(0), kills=3, most_events=40)

The child (``python -m unstable_core.testing.child``) loads the installed plugins plus the plugin
objects named by ``plugins`` ("module:attribute"), and prints one line per finished game ("g",
or "e" for an evaluation game) and per learner update ("u"), so that a kill lands at a chosen point of the run's progress, not after a guessed
time.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .contracts import comparable


def start_run(run_dir: str | Path, config: dict[str, Any], *, resume: bool = False, plugins: Sequence[str] = (),
              env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start the run (or its resumption) in a child process whose stdout reports progress. The
    child gets SIGINT back at its default (a shell in the background starts children ignoring it)."""
    args = [sys.executable, "-m", "unstable_core.testing.child", str(run_dir), json.dumps(config)]
    args += [a for p in plugins for a in ("--plugin", p)] + (["--resume"] if resume else [])
    return subprocess.Popen(args, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def kill_after(proc: subprocess.Popen, events: int, stall_s: float = 120, kinds: str = "geu") -> bool:
    """SIGKILL the child once it has reported ``events`` progress lines of the given kinds ("g" a
    training game, "e" an evaluation game, "u" an update); False if it ended first. A child that
    reports nothing for ``stall_s`` seconds fails the test."""
    seen = 0
    assert proc.stdout is not None, "start the child with stdout=subprocess.PIPE"
    while seen < events:
        ready, _, _ = select.select([proc.stdout], [], [], stall_s)
        if not ready:
            raise AssertionError(f"the run reported no progress for {stall_s:.0f} s")
        line = proc.stdout.readline()
        if not line:
            return False
        seen += line.decode().strip() in kinds
    proc.kill()
    return True


def run_with_kills(run_dir: str | Path, config: dict[str, Any], rng: Any, kills: int, most_events: int = 400,
                   plugins: Sequence[str] = (), timeout_s: float = 300) -> int:
    """Start the run and SIGKILL it after a random number (1..``most_events``) of finished games
    or updates, ``kills`` times, each time resuming from the latest snapshot (``--resume`` starts a
    run killed before its first snapshot over; one killed before it wrote its ``config.json`` is
    removed and started again); then let it finish. Returns how many kills landed before the run ended."""
    run_dir = Path(run_dir)
    landed = 0
    for attempt in range(kills + 1):
        resume = (run_dir / "config.json").exists()
        if not resume:
            shutil.rmtree(run_dir, ignore_errors=True)
        proc = start_run(run_dir, config, resume=resume, plugins=plugins)
        try:
            if attempt < kills and kill_after(proc, rng.randint(1, most_events)):
                proc.communicate()
                landed += 1
                continue
            _, err = proc.communicate(timeout=timeout_s)
            assert proc.returncode == 0, err.decode()[-3000:]
            return landed
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return landed


def restored_state(run_dir: str | Path, plugins: Any) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Restore the run's roles from its latest snapshot, as ``--resume`` does (a ``resume`` record
    is appended to its metrics), without playing a game. Returns (step, the snapshot's
    league/buffer/learner state, the restored roles' state), both as plain values (tensors as
    lists) to compare with ``==``."""
    from .. import build
    from ..builtin.executor_local import LocalExecutor
    from ..runtime.driver.driver import Driver
    from ..runtime.driver.state import RunContext
    from ..runtime.rundir.output import RunOutput
    from ..runtime.rundir.store import read_latest

    step, saved = read_latest(Path(run_dir))
    plan = build(None, run_dir=run_dir, plugins=plugins, resume=True).plan
    executor = LocalExecutor(plugins)

    async def restored() -> dict[str, Any]:
        roles = executor.start(plan)
        run = RunContext(cfg=plan.config, run_dir=plan.run_dir, roles=roles, out=RunOutput(plan, plugins), system=plugins)
        driver = Driver(run, await roles.buffer.capacity())
        try:
            await driver.snapshots.restore(step, saved)
            return {"league": await roles.league.state_dict(), "buffer": await roles.buffer.state_dict(),
                    "learner": await roles.learner.state_dict() if roles.learner else None,
                    "driver": {"step": driver.state.step, "games_played": driver.state.games_played}}
        finally:
            run.out.close()
            executor.shutdown()

    state = asyncio.run(restored())
    keys = ("league", "buffer", "learner")
    expected = {k: saved[k] for k in keys} | {"driver": {k: saved["driver"][k] for k in ("step", "games_played")}}
    return step, comparable(expected), comparable(state)


#: metrics fields that differ between two runs of the same config: timing, where and with what it ran
VARYING_FIELDS = frozenset({"time", "games_per_s", "duration_s", "update_s", "run_dir", "plugins"})


def comparable_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's ``metrics.jsonl`` as two runs of the same config must agree on it: without the
    ``VARYING_FIELDS`` and without what a resume adds (its ``resume`` record, the ``start``
    record of each resumed leg, ``started_over`` in a start record). A killed and resumed sync run
    equals the uninterrupted one."""
    out = []
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["type"] == "resume" or (record["type"] == "start" and record.get("resumed")):
            continue
        out.append({k: v for k, v in record.items() if k not in VARYING_FIELDS and k != "started_over"})
    return out
