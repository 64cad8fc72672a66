"""The `curriculum` env sampler. Public API of unstable_core only."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unstable_core import BuildContext, EnvSamplerSpec, EnvSpec, GameEndContext, GameResult, hookimpl


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
        score = learner_score(result)
        if score is not None:
            self.observe(result.game.env.env_id, score)


def learner_score(result: GameResult) -> float | None:
    """The trained model's score in a finished training game: 1 when its best seat's reward beats
    every seat of another model, 0.5 on a tie, 0 below; alone at the table, the sign of its
    reward (1, 0.5, 0). None when every other seat is the trained model too (self-play: both
    seats trained, or the model in the opponent's seat): such a game scores 0.5 on average
    whatever the model has learnt, and says nothing about mastery."""
    seats = result.game.seats
    mine = {seats[p].uid for p in result.game.train_seats}
    rewards = result.rewards
    learner = max(rewards.get(p, 0.0) for p in result.game.train_seats)
    if len(seats) == 1:
        others = [0.0]
    else:
        others = [rewards.get(p, 0.0) for p, ref in enumerate(seats) if ref.uid not in mine]
        if not others:
            return None
    best = max(others)
    return 1.0 if learner > best else (0.0 if learner < best else 0.5)


def self_play_problem(config: dict[str, Any]) -> str | None:
    """Why a run's training games would never score (``learner_score`` None), or None: a train
    env on which the trained model takes every seat, or one whose opponents are the trained model
    itself (the `mirror` model sampler). ``config`` is the resolved run config; a run without a
    learner (a tournament) plays no training games and is not checked."""
    if not config.get("learner"):
        return None
    sampler = (config.get("model_sampler") or {}).get("name")
    for i, env in enumerate(config.get("train_envs") or []):
        players = int(env.get("num_players", 2))
        actors = max(1, min(int(env.get("num_actors", 1)), players))
        where = f"train_envs.{i} ({env.get('env_id')})"
        if players > 1 and actors == players:
            return (f"{where} seats the trained model in every seat (num_actors = num_players = {players}): its games "
                    "score 0.5 whatever it learns, under any threshold above it; give it opponents (num_actors < "
                    "num_players) or use another env sampler")
        if players > 1 and sampler == "mirror":
            return (f"{where} is played against the trained model itself (model_sampler 'mirror'): its games score 0.5 "
                    "whatever it learns, under any threshold above it; draw other opponents (e.g. 'random' with "
                    "fixed_prob > 0) or use another env sampler")
    return None


def make_sampler(options: CurriculumOptions, ctx: BuildContext) -> CurriculumSampler:
    problem = self_play_problem(ctx.config)
    if problem is not None:
        raise ValueError(problem)
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
