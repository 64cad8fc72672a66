"""Buffers `step` and `episode` (UnstableBaselines' StepBuffer / EpisodeBuffer).

Both receive steps whose final and step transforms the core has applied, evict at random past
capacity and draw without replacement; the core applies the sampling transforms to a drawn batch.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import hookimpl
from ..components import BufferSpec
from ..state import rng_state, set_rng_state
from ..types import Step


class BufferOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    capacity: int = Field(
        1024, ge=1, le=10_000_000, description="Stored steps past which random steps are evicted; collection pauses while full."
    )


class StepBuffer:
    def __init__(self, options: BufferOptions, rng: random.Random) -> None:
        self.capacity = options.capacity
        self.rng = rng
        self.steps: list[Step] = []
        self.evicted = 0

    def add(self, episodes: list[list[Step]]) -> int:
        new = [s for ep in episodes for s in ep]
        self.steps.extend(new)
        while len(self.steps) > self.capacity:
            i = self.rng.randrange(len(self.steps))
            self.steps[i] = self.steps[-1]
            self.steps.pop()
            self.evicted += 1
        return len(new)

    def size(self) -> int:
        return len(self.steps)

    def draw(self, n: int) -> list[Step]:
        k = min(n, len(self.steps))
        chosen = sorted(self.rng.sample(range(len(self.steps)), k), reverse=True)
        batch = [self.steps[i] for i in chosen]
        for i in chosen:  # descending, so earlier indices stay valid
            self.steps.pop(i)
        batch.reverse()
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"steps": [s.model_dump(mode="json") for s in self.steps], "rng": rng_state(self.rng), "evicted": self.evicted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = [Step.model_validate(s) for s in state["steps"]]
        set_rng_state(self.rng, state["rng"])
        self.evicted = state["evicted"]


class EpisodeBuffer:
    """Keeps each episode it is given together (a seat's steps of one game; a group of games,
    ``collection.group_size``); draws whole episodes until n steps are reached."""

    def __init__(self, options: BufferOptions, rng: random.Random) -> None:
        self.capacity = options.capacity
        self.rng = rng
        self.episodes: list[list[Step]] = []
        self._size = 0
        self.evicted = 0

    def add(self, episodes: list[list[Step]]) -> int:
        self.episodes.extend(episodes)
        added = sum(len(e) for e in episodes)
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

    def draw(self, n: int) -> list[Step]:
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
        return steps

    def state_dict(self) -> dict[str, Any]:
        return {"episodes": [[s.model_dump(mode="json") for s in e] for e in self.episodes], "rng": rng_state(self.rng),
                "evicted": self.evicted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes = [[Step.model_validate(s) for s in e] for e in state["episodes"]]
        self._size = sum(len(e) for e in self.episodes)
        set_rng_state(self.rng, state["rng"])
        self.evicted = state["evicted"]


def buffer_factory(cls: type) -> Any:
    return lambda options, ctx: cls(options, random.Random(f"{ctx.seed}:buffer"))


@hookimpl
def unstable_buffers() -> list[BufferSpec]:
    return [
        BufferSpec(name="step", summary="Steps drawn at random without replacement", config=BufferOptions, factory=buffer_factory(StepBuffer)),
        BufferSpec(name="episode", summary="Whole episodes drawn at random", config=BufferOptions, factory=buffer_factory(EpisodeBuffer),
                   keeps_episodes=True),
    ]
