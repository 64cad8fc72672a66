"""Snapshots of a whole run at learner-step boundaries, and going on from one.

``snapshot(driver)`` gathers the state of every role (league, buffer, learner), the driver's
counters and the output's file sizes, and writes ``RUN_DIR/state/step-N`` (``snapshots``).
``restore(driver, step, state)`` loads it into freshly built roles, cuts metrics and transcripts
back to what the snapshot covered, publishes the restored policy to every rollout replica (each
confirms the version it serves) and logs a ``resume`` record.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from ..records import EvalRecord, ResumeRecord
from ..types import Checkpoint
from .evaluation import EvalRound
from .snapshots import write_snapshot


async def snapshot(driver: Any) -> None:
    keep = driver.cfg.training.keep_snapshots
    if keep == 0:
        return
    async with driver.ingest_lock:  # no game is half taken in while the roles are read
        full = await gather(driver)
    await asyncio.to_thread(write_snapshot, driver.run_dir, driver.state.step, full, keep)


async def gather(driver: Any) -> dict[str, Any]:
    roles, state = driver.roles, driver.state
    return {
        "driver": {
            "step": state.step, "games_played": state.games_played, "failures": dict(state.failures),
            "failures_in_a_row": state.failures_in_a_row, "dropped": state.dropped, "empty_batches": state.empty_batches,
            "eval_records": [r.model_dump(mode="json") for r in state.eval_records],
            "stats": driver.stats.state_dict(),
            "checkpoint": driver.last_checkpoint.model_dump(mode="json") if driver.last_checkpoint else None,
            "eval_rounds": [r.state_dict() for r in driver.eval_rounds],  # async: rounds still playing
        },
        "league": await roles.league.state_dict(),
        "buffer": await roles.buffer.state_dict(),
        "learner": await roles.learner.state_dict(),
        "output": driver.out.state_dict(),
    }


async def restore(driver: Any, step: int, full: dict[str, Any]) -> None:
    roles, state, saved = driver.roles, driver.state, full["driver"]
    state.step, state.games_played = saved["step"], saved["games_played"]
    state.failures = Counter(saved["failures"])
    state.failures_in_a_row, state.dropped, state.empty_batches = saved["failures_in_a_row"], saved["dropped"], saved["empty_batches"]
    state.eval_records = [EvalRecord.model_validate(r) for r in saved["eval_records"]]
    driver.stats.load_state_dict(saved["stats"])
    await roles.league.load_state_dict(full["league"])
    await roles.buffer.load_state_dict(full["buffer"])
    await roles.learner.load_state_dict(full["learner"])
    driver.out.load_state_dict(full["output"])
    if saved["checkpoint"] is not None:  # every replica serves the restored policy before any game
        ckpt = Checkpoint.model_validate(saved["checkpoint"])
        driver.last_checkpoint = ckpt
        for rollout in roles.rollouts:
            await rollout.set_policy(ckpt)  # checks the version served
    driver.eval_rounds = [EvalRound.from_state(r) for r in saved.get("eval_rounds", [])]  # played first
    driver.resumed = True
    replayed = len(full["league"]["in_flight"]) + sum(len(r.specs) for r in driver.eval_rounds)
    driver.out.log(ResumeRecord(step=step, time=driver.out.now(), games=state.games_played, replayed=replayed))
