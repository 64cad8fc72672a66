"""The `curriculum` env sampler. Public API of unstable_core only."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unstable_core import BuildContext, EnvSamplerSpec, EnvSpec, GameEndContext, hookimpl


class CurriculumOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.7, ge=0, le=1, description="Score (win 1, draw 0.5, loss 0) at which an env counts as mastered.")
    explore: float = Field(0.1, ge=0, le=1, description="Probability of a uniformly drawn env instead of the current stage.")
    tau: float = Field(0.05, gt=0, le=1, description="EMA rate of the per-env score.")


class CurriculumSampler:
    def __init__(self, options: CurriculumOptions) -> None:
        self.options = options
        self.scores: dict[str, float] = {}

    def sample(self, envs: Sequence[EnvSpec], rng: random.Random) -> EnvSpec:
        if not envs:
            raise ValueError("no training environments configured")
        if rng.random() < self.options.explore:
            return rng.choice(list(envs))
        for env in envs:
            if self.scores.get(env.env_id, 0.0) < self.options.threshold:
                return env
        return envs[-1]

    def observe(self, env_id: str, score: float) -> None:
        old = self.scores.get(env_id, 0.0)
        self.scores[env_id] = (1 - self.options.tau) * old + self.options.tau * score

    def state_dict(self) -> dict[str, Any]:
        return {"scores": dict(self.scores)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.scores = dict(state["scores"])

    @hookimpl
    def unstable_game_end(self, ctx: GameEndContext) -> None:
        result = ctx.result
        if result.game.mode != "train" or result.outcome == "failed" or not result.game.train_seats:
            return
        value = {"win": 1.0, "draw": 0.5, "loss": 0.0}
        for pid in result.game.train_seats:
            self.observe(result.game.env.env_id, value[result.outcome_for(pid)])


def make_sampler(options: CurriculumOptions, ctx: BuildContext) -> CurriculumSampler:
    sampler = CurriculumSampler(options)
    ctx.subscribe(sampler)  # receive unstable_game_end while the run lasts
    return sampler


@hookimpl
def unstable_env_samplers() -> list[EnvSamplerSpec]:
    return [
        EnvSamplerSpec(
            name="curriculum",
            summary="Train envs in listed order, moving on once the learner's score passes a threshold",
            config=CurriculumOptions,
            factory=make_sampler,
        )
    ]
