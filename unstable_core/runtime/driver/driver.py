"""The driver: the control flow of a run's games and updates, against role handles (DESIGN's
data flow). ``run.py`` tells the whole run in order around it.

    drive:      (train | tournament)
    train:      evaluate(0) -> [collect lanes || update loop] -> evaluate(final) -> snapshot
    collect:    schedule -> play -> ingest (record + add + transcripts + hooks), back-pressured
    update:     draw (filtered) -> update -> checkpoint -> publish + verify -> evaluate (every N) -> snapshot
    sync mode:  per step, rounds of games with the current policy -> update -> ...; nothing on a timer

The stages are collaborators built here with what they need: ``Collector`` (lanes, ingest),
``Evaluator`` (rounds), ``Snapshots`` (take, restore) and ``Reporter`` (summaries). Every role
is awaited through its handle (in-process objects with the local executor, actors with a
distributed one). Lifecycle hooks and trackers run here only. A stage that raises stops the
whole run at once (``asyncio.TaskGroup``): nothing waits on a dead stage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine

from ...errors import RunFailed
from ...executors import LearnerHandle
from ...records import EvalRecord, TrainRecord
from ...types import Batch, BatchEndContext, CheckpointContext, GameSpec
from .collector import Collector
from .evaluator import Evaluator
from .reporter import Reporter
from .snapshots import Snapshots
from .state import RunContext
from .stats import OutcomeAggregator

Spawn = Callable[[Coroutine[None, None, list[EvalRecord]]], object]
log = logging.getLogger("unstable")


class Driver:
    def __init__(self, run: RunContext, capacity: int) -> None:
        self.run = run
        self.cfg = run.cfg
        self.state = run.state
        self.reporter = Reporter(run, capacity)
        self.collector = Collector(run, self.reporter)
        self.evaluator = Evaluator(run, self.collector, self.reporter)
        self.snapshots = Snapshots(run, self.collector, self.evaluator)
        self.gap_warned = False  # the logprob gap's warning is given once a run

    async def drive(self) -> None:
        learner = self.run.roles.learner
        try:
            if learner is not None:
                await self.train(learner)
            else:
                await self.tournament()
        except BaseExceptionGroup as group:  # a stage died: its own error, not the group's
            raise first_error(group) from None

    async def tournament(self) -> None:
        remaining = self.cfg.collection.tournament_games
        league = self.run.roles.league

        async def next_specs(n: int) -> list[GameSpec]:
            nonlocal remaining
            n = min(n, remaining)
            remaining -= n
            return await league.schedule(n, "tournament") if n else []

        agg = OutcomeAggregator(anchor=None)
        await self.collector.lanes(self.cfg.collection.num_train_games, next_specs, agg.add_all)
        self.reporter.publish_eval(agg.records(0, self.run.out.now()))

    async def train(self, learner: LearnerHandle) -> None:
        batch_size = self.cfg.training.batch_size
        if self.reporter.capacity < batch_size:  # collection would pause on a full buffer that never holds a batch
            raise RunFailed(f"buffer capacity {self.reporter.capacity} is smaller than training.batch_size {batch_size}: "
                            "a batch could never be drawn")
        if not self.state.resumed:
            await self.evaluator.evaluate(0)
        if self.run.sync:
            for round in list(self.evaluator.rounds):  # restored from a snapshot
                await self.evaluator.play_round(round)
            await self.train_sync(learner)
        else:
            await self.train_async(learner)
        await self.evaluator.evaluate(self.state.step)  # none when resumed after it: the league plays a round once a checkpoint
        await self.snapshots.take()  # after the last update's: a run resumed with more steps keeps this evaluation

    async def train_async(self, learner: LearnerHandle) -> None:
        tc, collector = self.cfg.training, self.collector
        async with asyncio.TaskGroup() as group:  # evaluation rounds run while training goes on
            collecting = group.create_task(collector.lanes(self.cfg.collection.num_train_games, collector.next_train_specs))
            for round in list(self.evaluator.rounds):  # restored from a snapshot
                group.create_task(self.evaluator.play_round(round))
            while self.state.step < tc.learning_steps:
                collector.grew.clear()
                if await self.run.roles.buffer.size() < tc.batch_size:
                    await collector.grew.wait()
                    continue
                batch = await self.draw_batch()
                if batch is None:
                    continue
                await self.update(learner, batch)
                await self.step_done(learner, group.create_task)
            collector.stopping = True
            collecting.cancel()

    async def train_sync(self, learner: LearnerHandle) -> None:
        """Each step: play rounds of ``num_train_games`` games with the current policy until the
        buffer holds a batch, then update; evaluation in line. Nothing depends on timing."""
        tc, roles, collector = self.cfg.training, self.run.roles, self.collector
        while self.state.step < tc.learning_steps:
            while await roles.buffer.size() < tc.batch_size:
                specs = await roles.league.schedule(self.cfg.collection.num_train_games, "train")
                await collector.ingest(await collector.play_in_order(specs))
            batch = await self.draw_batch()
            if batch is None:
                continue
            await self.update(learner, batch)
            await self.step_done(learner, None)

    async def step_done(self, learner: LearnerHandle, spawn: Spawn | None) -> None:
        """After an update: checkpoint and publish, evaluate (in line in sync mode, else as a task
        ``spawn`` starts), then the run snapshot. The snapshot comes last, so that resuming
        from it never repeats what came before it."""
        tc, step = self.cfg.training, self.state.step
        saving = step % tc.save_every == 0 or step == tc.learning_steps
        if saving:
            await self.checkpoint(learner)
        if tc.eval_every and step % tc.eval_every == 0 and step < tc.learning_steps:
            if spawn is None:
                await self.evaluator.evaluate(step)
            elif (round := await self.evaluator.start_round(step)) is not None:  # in the snapshot below
                spawn(self.evaluator.play_round(round))
        if self.run.sync:
            await self.reporter.summary()
        if saving:
            await self.snapshots.take()

    async def draw_batch(self) -> Batch | None:
        """A batch as the buffer draws it (the steps the learner declared useless dropped);
        None when none was left."""
        tc, state = self.cfg.training, self.state
        batch = await self.run.roles.buffer.draw(tc.batch_size, state.step)
        self.collector.drained.set()  # collection may resume
        state.dropped += batch.dropped
        if batch.steps:
            state.empty_batches = 0
            return batch
        state.empty_batches += 1
        if state.empty_batches >= tc.max_empty_batches:
            raise RunFailed(
                f"{state.empty_batches} batches in a row had only zero-advantage steps (every game a draw or every "
                "reward equal): the policy may have collapsed. Change the opponents or reward transforms, or set "
                "training.filter_zero_advantage = false."
            )
        return None

    async def update(self, learner: LearnerHandle, batch: Batch) -> None:
        run = self.run
        began = time.monotonic()
        if self.cfg.training.colocate:  # the backends' memory is the learner's for the update
            metrics = await self.update_colocated(learner, batch)
        else:
            metrics = await learner.update(batch)
        update_s = time.monotonic() - began
        self.state.step += 1
        step = self.state.step
        versions = [s.turn.policy_version for s in batch.steps]
        metrics.update({
            "staleness_mean": step - 1 - sum(versions) / len(versions), "staleness_max": float(step - 1 - min(versions)),
            "batch_steps": float(len(batch.steps)), "dropped": float(batch.dropped), "update_s": round(update_s, 6),
            **batch.figures,
        })
        run.out.log(TrainRecord(step=step, time=run.out.now(), **metrics))
        self.check_logprob_gap(step, metrics)
        run.system.call_lifecycle("unstable_batch_end", ctx=BatchEndContext(
            run_dir=run.run_dir, learner_step=step, metrics=metrics, batch_size=len(batch.steps)))

    def check_logprob_gap(self, step: int, metrics: dict[str, float]) -> None:
        """Warn once a run when the learner's logprobs of the steps the updated weights played
        differ from the rollout's by more than ``training.logprob_gap_tolerance`` (mean, nats)."""
        gap, tolerance = metrics.get("logprob_gap_mean"), self.cfg.training.logprob_gap_tolerance
        if self.gap_warned or gap is None or not gap > tolerance:
            return
        self.gap_warned = True
        log.warning(
            "learner step %d: the learner's logprobs differ from the rollout's by %.3g nats a token on average (max %.3g "
            "over %d tokens) on steps the updated weights played, above training.logprob_gap_tolerance = %g: the learner "
            "does not score the distribution that sampled (importance ratios and on-policy gradients are off). Usual "
            "causes: a model folder's generation_config.json (repetition_penalty, top_k) applied at sampling; "
            "learner.temperature not the serving temperature; bfloat16/float16 on one side, float32 on the other; a logit "
            "softcap (final_logit_softcapping) applied on one side only; a backend serving a stale adapter. Warned once; "
            "every train record carries logprob_gap_mean and logprob_gap_max (docs/logprobs.md).",
            step, gap, metrics.get("logprob_gap_max", gap), int(metrics.get("logprob_gap_tokens", 0)), tolerance)

    async def update_colocated(self, learner: LearnerHandle, batch: Batch) -> dict[str, float]:
        """The update between every rollout replica's backend sleeping and waking; the seconds
        those took in ``sleep_s`` and ``wake_s``."""
        rollouts = self.run.roles.rollouts
        began = time.monotonic()
        await asyncio.gather(*(r.sleep() for r in rollouts))
        slept = time.monotonic()
        try:
            metrics = await learner.update(batch)
        finally:
            woke = time.monotonic()
            await asyncio.gather(*(r.wake() for r in rollouts))
        return {**metrics, "sleep_s": round(slept - began, 6), "wake_s": round(time.monotonic() - woke, 6)}

    async def checkpoint(self, learner: LearnerHandle) -> None:
        """Save, publish to every rollout replica and check the version each serves, then make
        the checkpoint current: no game is scheduled with a checkpoint a replica lacks."""
        run = self.run
        uid = f"ckpt-{self.state.step}"
        ckpt = await learner.save(f"{run.run_dir}/checkpoints/{uid}", uid)
        self.state.checkpoints.append(ckpt)
        for rollout in run.roles.rollouts:
            await rollout.set_policy(ckpt)
        ref = await run.roles.league.add_checkpoint(ckpt)
        if await run.roles.league.wants_payoffs():  # the sampler reads the new checkpoint's exact payoffs against every earlier one
            others = [r for r in await run.roles.league.population() if r.uid != ref.uid]
            values = await run.roles.rollouts[0].expected_payoffs(ref, others, run.cfg.train_envs)
            await run.roles.league.record_payoffs(ref.uid, {r.uid: v for r, v in zip(others, values, strict=True)})
        members = await run.roles.league.least_exploitable_members()  # the sampler reads their least exploitable mixture
        if members:
            weights = await run.roles.rollouts[0].least_exploitable_mixture(members, run.cfg.train_envs[0])
            await run.roles.league.record_least_exploitable([m.uid for m in members], weights)
        run.out.write_json("registry.json", await run.roles.league.snapshot())
        run.system.call_lifecycle("unstable_checkpoint_saved", ctx=CheckpointContext(run_dir=run.run_dir, checkpoint=ckpt))


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error in a (nested) exception group that is not a cancellation."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            exc = first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]
