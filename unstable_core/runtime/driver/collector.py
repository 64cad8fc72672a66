"""Collection: keeps games in flight and takes their results in.

    lanes:   schedule a batch of specs -> a rollout replica plays it -> take_in, in several lanes
             per replica (async mode), or rounds played to their end (sync mode)
    ingest:  the league records the results, the buffer adds the training games, the run output
             writes them (transcripts), per-env stats, ``unstable_game_end`` hooks, failure limits

Back-pressure: a lane schedules training games only while the buffer has room; a drawn batch
(``drained``) lets it go on.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from ...errors import RunFailed
from ...executors import RolloutHandle
from ...types import GameEndContext, GameResult, GameSpec
from ..game.eager import shielded
from .reporter import Reporter
from .state import RunContext

LANES_PER_ROLLOUT = 4  # concurrent batches per rollout replica: one finishes while others play
MAX_FAILURES_IN_A_ROW = 200
SUMMARY_EVERY_S = 1.0

NextSpecs = Callable[[int], Awaitable[list[GameSpec]]]
OnResults = Callable[[list[GameResult]], None]


class Collector:
    def __init__(self, run: RunContext, reporter: Reporter) -> None:
        self.run = run
        self.reporter = reporter
        self.stopping = False
        self.grew, self.drained = asyncio.Event(), asyncio.Event()  # buffer grew / a batch was drawn
        self.ingest_lock = asyncio.Lock()  # a snapshot never sees a game half taken in

    async def play_in_order(self, specs: list[GameSpec]) -> list[GameResult]:
        """Play specs split evenly over the rollout replicas; results in the specs' order."""
        rollouts = self.run.roles.rollouts
        parts = [specs[i :: len(rollouts)] for i in range(len(rollouts))]
        played = await asyncio.gather(*(r.play(p) for r, p in zip(rollouts, parts) if p))
        results: list[GameResult] = [None] * len(specs)  # type: ignore[list-item]
        for i, part in enumerate(played):
            results[i :: len(rollouts)] = part
        return results

    async def lanes(self, limit: int, next_specs: NextSpecs, on_results: OnResults | None = None) -> None:
        """Keep about ``limit`` games in flight over the rollout replicas, in batches (in sync
        mode: rounds of ``limit`` games, each played to its end and counted in game order)."""
        if self.run.sync:
            while specs := await next_specs(limit):
                await self.take_in(await self.play_in_order(specs), on_results)
            return
        rollouts = self.run.roles.rollouts
        count = max(1, min(limit, LANES_PER_ROLLOUT * len(rollouts)))
        chunk = max(1, math.ceil(limit / count))

        async def lane(rollout: RolloutHandle) -> None:
            while True:
                specs = await next_specs(chunk)
                if not specs:
                    return
                results = await rollout.play(specs)
                await self.take_in(results, on_results)
                del results, specs  # a waiting lane holds no finished game
                # games whose agents answer at once never suspend: after each batch, the other
                # lanes, the learner and signals get their turn
                await asyncio.sleep(0)

        async with asyncio.TaskGroup() as group:
            for i in range(count):
                group.create_task(lane(rollouts[i % len(rollouts)]))

    async def next_train_specs(self, n: int) -> list[GameSpec]:
        roles = self.run.roles
        while not self.stopping:
            self.drained.clear()
            if await roles.buffer.size() < self.reporter.capacity:
                return await roles.league.schedule(n, "train")
            await self.drained.wait()  # back-pressure: the buffer is full until a batch is drawn
        return []

    async def take_in(self, results: list[GameResult], on_results: OnResults | None) -> None:
        """Ingest finished games and hand them to the lane's owner (an evaluation round), as one
        step that a run snapshot never splits. Shielded: a stop that lands mid-ingest lets it
        finish (a remote role carries out a call its caller stopped waiting for), and the final
        summary waits for it (``settled``), so the driver's counts and the roles' agree."""
        await shielded(self._take_in(results, on_results))

    async def _take_in(self, results: list[GameResult], on_results: OnResults | None) -> None:
        async with self.ingest_lock:
            await self.ingest(results)
            if on_results is not None:
                on_results(results)

    async def settled(self) -> None:
        """Wait for an ingest in flight (a stopped run's last one) to end."""
        async with self.ingest_lock:
            pass

    async def ingest(self, results: list[GameResult]) -> None:
        run, state = self.run, self.run.state
        await run.roles.league.record(results)
        train = [r for r in results if r.game.mode == "train"]  # the buffer keeps training games only
        if train:
            await run.roles.buffer.add(train)
        run.out.games(results, state.step)
        game_end = bool(run.system.hook.unstable_game_end.get_hookimpls())
        for result in results:
            state.stats.add(result)
            state.games_played += 1
            if game_end:  # the context is built only for listeners
                run.system.call_lifecycle("unstable_game_end", ctx=GameEndContext(run_dir=run.run_dir, result=result))
            if result.outcome == "failed":
                state.failures[(result.error or "unknown").split(":")[0]] += 1
                state.failures_in_a_row += 1
                self.check_failures(result)
            else:
                state.failures_in_a_row = 0
        self.grew.set()
        if not run.sync and run.out.now() - self.reporter.last_summary >= SUMMARY_EVERY_S:  # sync: one a step
            await self.reporter.summary()

    def check_failures(self, result: GameResult) -> None:
        state = self.run.state
        limit = self.run.cfg.collection.max_game_failures
        total = sum(state.failures.values())
        if (limit is not None and total > limit) or state.failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
            raise RunFailed(
                f"{total} games failed ({state.failures_in_a_row} in a row); last error: {result.error}. "
                f"Failures by reason: {dict(state.failures)}"
            )
