"""Buffers `step` and `episode` (UnstableBaselines' StepBuffer / EpisodeBuffer).

Both apply the run's final transforms to a game's rewards and the step transforms to each step
when a game is added, evict at random past capacity, draw without replacement, and apply the
sampling transforms to each drawn batch. Failed games are never stored.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import hookimpl
from ..components import BufferSpec
from ..runtime.rewards import RewardPipelines
from ..types import Batch, GameResult, Step


class BufferOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capacity: int = Field(1024, ge=1, description="Stored steps past which random steps are evicted; collection pauses while full.")


def result_to_steps(result: GameResult, rewards: RewardPipelines) -> list[list[Step]]:
    """One list of steps per trained seat, final and step transforms applied."""
    if result.outcome == "failed" or not result.game.train_seats:
        return []
    env_id = result.game.env.env_id
    final = rewards.final(dict(result.rewards), env_id)
    episodes = []
    for pid in result.game.train_seats:
        turns = result.trajectories[pid].turns
        r = float(final.get(pid, 0.0))
        episodes.append(
            [
                rewards.step(
                    Step(
                        env_id=env_id,
                        game_idx=result.game.game_idx,
                        player_id=pid,
                        turn_index=i,
                        num_turns=len(turns),
                        turn=t,
                        final_reward=r,
                        reward=r,
                    )
                )
                for i, t in enumerate(turns)
            ]
        )
    return [e for e in episodes if e]


class StepBuffer:
    def __init__(self, options: BufferOptions, rewards: RewardPipelines | None, rng: random.Random) -> None:
        self.capacity = options.capacity
        self.rewards = rewards or RewardPipelines()
        self.rng = rng
        self.steps: list[Step] = []
        self.evicted = 0

    def add(self, result: GameResult) -> int:
        new = [s for ep in result_to_steps(result, self.rewards) for s in ep]
        self.steps.extend(new)
        while len(self.steps) > self.capacity:
            i = self.rng.randrange(len(self.steps))
            self.steps[i] = self.steps[-1]
            self.steps.pop()
            self.evicted += 1
        return len(new)

    def size(self) -> int:
        return len(self.steps)

    def draw(self, n: int, learner_version: int) -> Batch:
        k = min(n, len(self.steps))
        chosen = sorted(self.rng.sample(range(len(self.steps)), k), reverse=True)
        batch = [self.steps[i] for i in chosen]
        for i in chosen:  # descending, so earlier indices stay valid
            self.steps.pop(i)
        batch.reverse()
        return Batch(steps=self.rewards.sampling(batch), learner_version=learner_version)


class EpisodeBuffer:
    """Keeps a seat's steps of one game together; draws whole episodes until n steps are reached."""

    def __init__(self, options: BufferOptions, rewards: RewardPipelines | None, rng: random.Random) -> None:
        self.capacity = options.capacity
        self.rewards = rewards or RewardPipelines()
        self.rng = rng
        self.episodes: list[list[Step]] = []
        self._size = 0
        self.evicted = 0

    def add(self, result: GameResult) -> int:
        eps = result_to_steps(result, self.rewards)
        self.episodes.extend(eps)
        added = sum(len(e) for e in eps)
        self._size += added
        while self._size > self.capacity and len(self.episodes) > 1:
            i = self.rng.randrange(len(self.episodes))
            self._size -= len(self.episodes[i])
            self.episodes[i] = self.episodes[-1]
            self.episodes.pop()
            self.evicted += 1
        return added

    def size(self) -> int:
        return self._size

    def draw(self, n: int, learner_version: int) -> Batch:
        order = list(range(len(self.episodes)))
        self.rng.shuffle(order)
        taken: list[int] = []
        count = 0
        for i in order:
            if count >= n:
                break
            taken.append(i)
            count += len(self.episodes[i])
        steps = [s for i in taken for s in self.episodes[i]]
        for i in sorted(taken, reverse=True):
            self.episodes.pop(i)
        self._size -= len(steps)
        return Batch(steps=self.rewards.sampling(steps), learner_version=learner_version)


def _factory(cls: type) -> Any:
    return lambda options, ctx: cls(options, ctx.rewards, random.Random(f"{ctx.seed}:buffer"))


@hookimpl
def unstable_buffers() -> list[BufferSpec]:
    return [
        BufferSpec(name="step", summary="Steps drawn at random without replacement", config=BufferOptions, factory=_factory(StepBuffer)),
        BufferSpec(name="episode", summary="Whole episodes drawn at random", config=BufferOptions, factory=_factory(EpisodeBuffer)),
    ]
