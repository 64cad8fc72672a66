"""Snapshots of a whole run at learner-step boundaries, and going on from one.

``take()`` gathers the state of every role (league, buffer, learner), the driver's counters,
the evaluation rounds still playing and the output's file sizes, and writes
``RUN_DIR/state/step-N`` (``rundir/store.py``). ``restore(step, state)`` loads it into freshly
built roles, cuts metrics and transcripts back to what the snapshot covered, publishes the
restored policy to every rollout replica (each confirms the version it serves) and logs a
``resume`` record.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

from ...errors import UnstableError, describe_error
from ...records import EvalRecord, ResumeRecord
from ...types import Checkpoint
from ..rundir.store import checkpoint_files, write_snapshot
from .collector import Collector
from .evaluator import Evaluator
from .state import RunContext


class Snapshots:
    def __init__(self, run: RunContext, collector: Collector, evaluator: Evaluator) -> None:
        self.run = run
        self.collector = collector
        self.evaluator = evaluator
        #: {checkpoint uid: {file: [size, SHA-256]}}: hashed once, when a snapshot first names it
        self.checkpoint_files: dict[str, dict[str, list[Any]]] = {}

    async def take(self) -> None:
        run = self.run
        keep = run.cfg.training.keep_snapshots
        if keep == 0:
            return
        async with self.collector.ingest_lock:  # no game is half taken in while the roles are read
            full = await self.gather()
        for ckpt in run.state.checkpoints:
            if ckpt.uid not in self.checkpoint_files and ckpt.path and os.path.exists(ckpt.path):  # a local checkpoint
                self.checkpoint_files[ckpt.uid] = await asyncio.to_thread(checkpoint_files, ckpt.path)
        full["driver"]["checkpoint_files"] = {c.uid: self.checkpoint_files[c.uid] for c in run.state.checkpoints
                                              if c.uid in self.checkpoint_files}
        await asyncio.to_thread(write_snapshot, run.run_dir, run.state.step, full, keep)

    async def gather(self) -> dict[str, Any]:
        run, state = self.run, self.run.state
        learner = run.roles.learner
        assert learner is not None  # only training runs take snapshots
        return {
            "driver": {
                "step": state.step, "games_played": state.games_played, "failures": dict(state.failures),
                "failures_in_a_row": state.failures_in_a_row, "dropped": state.dropped, "empty_batches": state.empty_batches,
                "eval_records": [r.model_dump(mode="json") for r in state.eval_records],
                "stats": state.stats.state_dict(),
                "checkpoints": [c.model_dump(mode="json") for c in state.checkpoints],
                "reported_pairs": [[a, b, games] for (a, b), games in state.reported_pairs.items()],
                "eval_rounds": self.evaluator.state_dict(),  # async: rounds still playing
            },
            "league": await run.roles.league.state_dict(),
            "buffer": await run.roles.buffer.state_dict(),
            "learner": await learner.state_dict(),
            "output": run.out.state_dict(),
        }

    async def restore(self, step: int, full: dict[str, Any]) -> None:
        """Load the snapshot of ``step``; a snapshot whose values are not what a snapshot holds is
        one line naming it (a component's own error is named by its component)."""
        try:
            await self._restore(step, full)
        except UnstableError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise UnstableError(f"run directory {self.run.run_dir}: the snapshot of step {step} (state/step-{step}) is "
                                f"malformed: {describe_error(exc)}") from None

    async def _restore(self, step: int, full: dict[str, Any]) -> None:
        run, state, saved = self.run, self.run.state, full["driver"]
        roles = run.roles
        state.step, state.games_played = saved["step"], saved["games_played"]
        state.failures = Counter(saved["failures"])
        state.failures_in_a_row, state.dropped, state.empty_batches = saved["failures_in_a_row"], saved["dropped"], saved["empty_batches"]
        state.eval_records = [EvalRecord.model_validate(r) for r in saved["eval_records"]]
        # snapshots written before the list held only the latest checkpoint
        saved_checkpoints = saved["checkpoints"] if "checkpoints" in saved else [c for c in [saved["checkpoint"]] if c is not None]
        state.checkpoints = [Checkpoint.model_validate(c) for c in saved_checkpoints]
        self.checkpoint_files = dict(saved.get("checkpoint_files", {}))  # checked before the roles were built
        state.stats.load_state_dict(saved["stats"])
        # a snapshot written before ratings records held only changed pairs: the next one holds them all
        state.reported_pairs = {(a, b): games for a, b, games in saved.get("reported_pairs", [])}
        await roles.league.load_state_dict(full["league"])
        await roles.buffer.load_state_dict(full["buffer"])
        if roles.learner is not None:
            await roles.learner.load_state_dict(full["learner"])
        run.out.load_state_dict(full["output"])
        ckpt = state.last_checkpoint
        if ckpt is not None:  # every replica serves the restored policy before any game
            for rollout in roles.rollouts:
                await rollout.set_policy(ckpt)  # checks the version served
        self.evaluator.load_state_dict(saved.get("eval_rounds", []))  # played first
        state.resumed = True
        replayed = len(full["league"]["in_flight"]) + sum(len(r.specs) for r in self.evaluator.rounds)
        run.out.log(ResumeRecord(step=step, time=run.out.now(), games=state.games_played, replayed=replayed,
                                 repaired=run.out.repaired))
