"""The driver: the one control flow of a run, against role handles (DESIGN's data flow).

    drive:      run start -> (train | tournament) -> run end
    train:      evaluate(0) -> [collect lanes || update loop] -> evaluate(final)
    collect:    schedule -> play -> ingest (record + add + transcripts + hooks), back-pressured
    update:     draw -> filter -> update -> checkpoint -> publish + verify -> evaluate (every N) -> snapshot
    sync mode:  per step, rounds of games with the current policy -> update -> ...; nothing on a timer

Collection (lanes, ingest) is in ``collection.py``, evaluation rounds in ``evaluation.py``,
snapshots and resume in ``resume.py``.

Every role is awaited through its handle (in-process objects with the local executor, actors
with a distributed one). Lifecycle hooks and trackers run here only. A stage that raises stops
the whole run at once (``asyncio.TaskGroup``): nothing waits on a dead stage.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import RunFailed
from ..records import EvalRecord, RatingsRecord, SummaryRecord, TrainRecord
from ..types import Batch, BatchEndContext, Checkpoint, CheckpointContext, GameSpec
from .output import RunOutput
from .plan import RunPlan
from .collection import Collection
from .evaluation import EvalRound, evaluate, play_round, start_round
from .resume import snapshot
from .roles import RoleHandles, first_error
from .stats import CollectionStats, OutcomeAggregator


@dataclass
class DriverState:
    step: int = 0  # learner updates made
    games_played: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failures_in_a_row: int = 0
    dropped: int = 0
    empty_batches: int = 0
    eval_records: list[EvalRecord] = field(default_factory=list)


class Driver(Collection):
    def __init__(self, plan: RunPlan, roles: RoleHandles, output: RunOutput, system: Any) -> None:
        self.cfg = plan.config
        self.run_dir = plan.run_dir
        self.roles = roles
        self.out = output
        self.system = system
        self.state = DriverState()
        self.stats = CollectionStats()
        self.stopping = False
        self.grew, self.drained = asyncio.Event(), asyncio.Event()  # buffer grew / a batch was drawn
        self.last_summary = 0.0
        self.capacity = 0
        self.sync = self.cfg.collection.mode == "sync"
        self.last_checkpoint: Checkpoint | None = None
        self.resumed = False  # went on from a snapshot (resume.restore)
        self.eval_rounds: list[EvalRound] = []  # rounds being played (saved in snapshots)
        self.ingest_lock = asyncio.Lock()  # a snapshot never sees a game half taken in

    # -- the stages -------------------------------------------------------------------------------
    async def run(self) -> None:
        self.capacity = await self.roles.buffer.capacity()
        try:
            if self.roles.learner is not None:
                await self.train()
            else:
                await self.tournament()
        except BaseExceptionGroup as group:  # a stage died: its own error, not the group's
            raise first_error(group) from None

    async def tournament(self) -> None:
        remaining = self.cfg.collection.tournament_games
        league = self.roles.league

        async def next_specs(n: int) -> list[GameSpec]:
            nonlocal remaining
            n = min(n, remaining)
            remaining -= n
            return await league.schedule(n, "tournament") if n else []

        agg = OutcomeAggregator(anchor=None)
        await self.lanes(self.cfg.collection.num_train_games, next_specs, agg.add_all)
        self.publish_eval(agg.records(0, self.out.now()))

    async def train(self) -> None:
        batch_size = self.cfg.training.batch_size
        if self.capacity < batch_size:  # collection would pause on a full buffer that never holds a batch
            raise RunFailed(f"buffer capacity {self.capacity} is smaller than training.batch_size {batch_size}: "
                            "a batch could never be drawn")
        if not self.resumed:
            await self.evaluate(0)
        settings = await self.roles.learner.settings()
        if self.sync:
            for round in list(self.eval_rounds):  # restored from a snapshot
                await play_round(self, round)
            await self.train_sync(settings)
        else:
            await self.train_async(settings)
        await self.evaluate(self.state.step)

    async def train_async(self, settings: dict[str, Any]) -> None:
        tc = self.cfg.training
        async with asyncio.TaskGroup() as group:  # evaluation rounds run while training goes on
            collector = group.create_task(self.lanes(self.cfg.collection.num_train_games, self.next_train_specs))
            for round in list(self.eval_rounds):  # restored from a snapshot
                group.create_task(play_round(self, round))
            while self.state.step < tc.learning_steps:
                batch = await self.next_batch(settings["drop_zero_advantage"])
                if batch is None:
                    continue
                await self.update(batch)
                await self.step_done(group.create_task)
            self.stopping = True
            collector.cancel()

    async def train_sync(self, settings: dict[str, Any]) -> None:
        """Each step: play rounds of ``num_train_games`` games with the current policy until the
        buffer holds a batch, then update; evaluation in line. Nothing depends on timing."""
        tc, league, buffer = self.cfg.training, self.roles.league, self.roles.buffer
        while self.state.step < tc.learning_steps:
            while await buffer.size() < tc.batch_size:
                await self.ingest(await self.play_in_order(await league.schedule(self.cfg.collection.num_train_games, "train")))
            batch = await self.draw_batch(settings["drop_zero_advantage"])
            if batch is None:
                continue
            await self.update(batch)
            await self.step_done(None)

    async def step_done(self, spawn: Callable[[Any], Any] | None) -> None:
        """After an update: checkpoint and publish, evaluate (in line in sync mode, else as a task
        ``spawn`` starts), then the run snapshot. The snapshot comes last, so that resuming
        from it never repeats what came before it."""
        tc, step = self.cfg.training, self.state.step
        saving = step % tc.save_every == 0 or step == tc.learning_steps
        if saving:
            await self.checkpoint()
        if tc.eval_every and step % tc.eval_every == 0 and step < tc.learning_steps:
            if spawn is None:
                await self.evaluate(step)
            elif (round := await start_round(self, step)) is not None:  # in the snapshot below
                spawn(play_round(self, round))
        if self.sync:
            await self.summary()
        if saving:
            await snapshot(self)

    # -- training ---------------------------------------------------------------------------------
    async def next_batch(self, drop_zero_advantage: bool) -> Batch | None:
        self.grew.clear()
        if await self.roles.buffer.size() < self.cfg.training.batch_size:
            await self.grew.wait()
            return None
        return await self.draw_batch(drop_zero_advantage)

    async def draw_batch(self, drop_zero_advantage: bool) -> Batch | None:
        """A batch, filtered; None when the filter emptied it."""
        tc = self.cfg.training
        batch = await self.roles.buffer.draw(tc.batch_size, self.state.step)
        self.drained.set()  # collection may resume
        if drop_zero_advantage:
            keep = [s for s in batch.steps if s.reward != 0.0]
            dropped = len(batch.steps) - len(keep)
            self.state.dropped += dropped
            batch = batch.model_copy(update={"steps": keep, "dropped": dropped})
        if batch.steps:
            self.state.empty_batches = 0
            return batch
        self.state.empty_batches += 1
        if self.state.empty_batches >= tc.max_empty_batches:
            raise RunFailed(
                f"{self.state.empty_batches} batches in a row had only zero-advantage steps (every game a draw or every "
                "reward equal): the policy may have collapsed. Change the opponents or reward transforms, or set "
                "training.filter_zero_advantage = false."
            )
        return None

    async def update(self, batch: Batch) -> None:
        began = time.monotonic()
        metrics = await self.roles.learner.update(batch)
        update_s = time.monotonic() - began
        self.state.step += 1
        step = self.state.step
        versions = [s.turn.policy_version for s in batch.steps]
        derived = {"staleness_mean": step - 1 - sum(versions) / len(versions), "staleness_max": float(step - 1 - min(versions)),
                   "batch_steps": float(len(batch.steps)), "dropped": float(batch.dropped), "update_s": round(update_s, 6)}
        metrics.update(derived)
        self.out.log(TrainRecord(step=step, time=self.out.now(), **metrics))
        self.system.call_lifecycle("unstable_batch_end", ctx=BatchEndContext(run_dir=self.run_dir, learner_step=step,
                                                                             metrics=metrics, batch_size=len(batch.steps)))

    async def checkpoint(self) -> None:
        """Save, publish to every rollout replica and check the version each serves, then make
        the checkpoint current: no game is scheduled with a checkpoint a replica lacks."""
        uid = f"ckpt-{self.state.step}"
        ckpt = self.last_checkpoint = await self.roles.learner.save(f"{self.run_dir}/checkpoints/{uid}", uid)
        for rollout in self.roles.rollouts:
            await rollout.set_policy(ckpt)
        await self.roles.league.add_checkpoint(ckpt)
        self.out.write_json("registry.json", await self.roles.league.snapshot())
        self.system.call_lifecycle("unstable_checkpoint_saved", ctx=CheckpointContext(run_dir=self.run_dir, checkpoint=ckpt))

    # -- evaluation (evaluation.py) ----------------------------------------------------------------
    async def evaluate(self, step: int) -> list[EvalRecord]:
        return await evaluate(self, step)

    def publish_eval(self, records: list[EvalRecord]) -> None:
        for record in records:
            self.out.log(record)
        self.state.eval_records += records

    # -- summaries --------------------------------------------------------------------------------
    async def summary(self) -> None:
        self.last_summary = now = self.out.now()
        self.out.flush()
        state = self.state
        self.out.log(SummaryRecord(
            step=state.step, time=now, games=state.games_played, games_per_s=state.games_played / max(now, 1e-9),
            failed=sum(state.failures.values()), failures=dict(state.failures), buffer_size=await self.roles.buffer.size(),
            buffer_capacity=self.capacity, dropped_zero_advantage=state.dropped, generated_tokens=self.stats.generated_tokens,
            envs=self.stats.snapshot(),
        ))
        snapshot = await self.roles.league.snapshot()
        self.out.log(RatingsRecord(step=state.step, time=now, games=state.games_played, ratings=snapshot["ratings"],
                                   pairs=snapshot["pairs"]))
