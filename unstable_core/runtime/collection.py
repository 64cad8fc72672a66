"""Collection, the driver's stage that keeps games in flight and takes their results in:

    lanes:   schedule a batch of specs -> a rollout replica plays it -> take_in, in several lanes
             per replica (async mode), or rounds played to their end (sync mode)
    ingest:  the league records the results, the buffer adds the training games, the run output
             writes them (transcripts), per-env stats, ``unstable_game_end`` hooks, failure limits

Back-pressure: a lane schedules training games only while the buffer has room; a drawn batch
(``drained``) lets it go on. ``Collection`` is a part of ``Driver`` (driver.py), which owns the
state it reads: the config, role handles, run output, plugin system and the run's counters.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import RunFailed
from ..types import GameEndContext, GameResult, GameSpec
from .eager import shielded

LANES_PER_ROLLOUT = 4  # concurrent batches per rollout replica: one finishes while others play
MAX_FAILURES_IN_A_ROW = 200
SUMMARY_EVERY_S = 1.0


class Collection:
    """The collection stage of ``Driver``: its methods read the driver's ``cfg``, ``roles``,
    ``out``, ``system``, ``state``, ``stats``, ``sync``, ``stopping``, ``capacity``, ``grew``,
    ``drained`` and ``ingest_lock``, and call its ``summary``."""

    async def play_in_order(self, specs: list[GameSpec]) -> list[GameResult]:
        """Play specs split evenly over the rollout replicas; results in the specs' order."""
        rollouts = self.roles.rollouts
        parts = [specs[i :: len(rollouts)] for i in range(len(rollouts))]
        played = await asyncio.gather(*(r.play(p) for r, p in zip(rollouts, parts) if p))
        results: list[GameResult] = [None] * len(specs)  # type: ignore[list-item]
        for i, part in enumerate(played):
            results[i :: len(rollouts)] = part
        return results

    async def lanes(self, limit: int, next_specs: Callable[[int], Awaitable[list[GameSpec]]],
                    on_results: Callable[[list[GameResult]], None] | None = None) -> None:
        """Keep about ``limit`` games in flight over the rollout replicas, in batches (in sync
        mode: rounds of ``limit`` games, each played to its end and counted in game order)."""
        if self.sync:
            while specs := await next_specs(limit):
                await self.take_in(await self.play_in_order(specs), on_results)
            return
        rollouts = self.roles.rollouts
        count = max(1, min(limit, LANES_PER_ROLLOUT * len(rollouts)))
        chunk = max(1, math.ceil(limit / count))

        async def lane(rollout: Any) -> None:
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
        while not self.stopping:
            self.drained.clear()
            if await self.roles.buffer.size() < self.capacity:
                return await self.roles.league.schedule(n, "train")
            await self.drained.wait()  # back-pressure: the buffer is full until a batch is drawn
        return []

    async def take_in(self, results: list[GameResult], on_results: Callable[[list[GameResult]], None] | None) -> None:
        """Ingest finished games and hand them to the lane's owner (an evaluation round), as one
        step that a run snapshot never splits. Shielded: a stop that lands mid-ingest lets it
        finish (a remote role carries out a call its caller stopped waiting for), and the final
        summary waits for it (``settled``), so the driver's counts and the roles' agree."""
        await shielded(self._take_in(results, on_results))

    async def _take_in(self, results: list[GameResult], on_results: Callable[[list[GameResult]], None] | None) -> None:
        async with self.ingest_lock:
            await self.ingest(results)
            if on_results is not None:
                on_results(results)

    async def settled(self) -> None:
        """Wait for an ingest in flight (a stopped run's last one) to end."""
        async with self.ingest_lock:
            pass

    async def ingest(self, results: list[GameResult]) -> None:
        state = self.state
        await self.roles.league.record(results)
        train = [r for r in results if r.game.mode == "train"]  # the buffer keeps training games only
        if train:
            await self.roles.buffer.add(train)
        self.out.games(results, state.step)
        game_end = bool(self.system.hook.unstable_game_end.get_hookimpls())
        for result in results:
            self.stats.add(result)
            state.games_played += 1
            if game_end:  # the context is built only for listeners
                self.system.call_lifecycle("unstable_game_end", ctx=GameEndContext(run_dir=self.run_dir, result=result))
            if result.outcome == "failed":
                state.failures[(result.error or "unknown").split(":")[0]] += 1
                state.failures_in_a_row += 1
                self.check_failures(result)
            else:
                state.failures_in_a_row = 0
        self.grew.set()
        if not self.sync and self.out.now() - self.last_summary >= SUMMARY_EVERY_S:  # sync: one a step
            await self.summary()

    def check_failures(self, result: GameResult) -> None:
        limit = self.cfg.collection.max_game_failures
        total = sum(self.state.failures.values())
        if (limit is not None and total > limit) or self.state.failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
            raise RunFailed(
                f"{total} games failed ({self.state.failures_in_a_row} in a row); last error: {result.error}. "
                f"Failures by reason: {dict(self.state.failures)}"
            )
