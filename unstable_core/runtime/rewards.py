"""The three reward pipelines (final, step, sampling), composed in config order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..types import Step


class RewardPipelines:
    """Holds the built transforms of each stage; buffers call the three methods."""

    def __init__(self, final: Sequence[Any] = (), step: Sequence[Any] = (), sampling: Sequence[Any] = ()) -> None:
        self.final_transforms = list(final)
        self.step_transforms = list(step)
        self.sampling_transforms = list(sampling)

    def final(self, rewards: dict[int, float], env_id: str) -> dict[int, float]:
        for t in self.final_transforms:
            rewards = t(dict(rewards), env_id)
        return rewards

    def step(self, step: Step) -> Step:
        for t in self.step_transforms:
            step = t(step)
        return step

    def sampling(self, steps: list[Step]) -> list[Step]:
        for t in self.sampling_transforms:
            steps = t(list(steps))
        return steps
