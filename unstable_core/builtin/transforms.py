"""Reward transforms: final (game rewards), step (one step), sampling (a drawn batch).

final     win-draw-loss, role-advantage, role-advantage-by-env
step      reward-for-format, penalty-for-invalid-move, penalty-for-truncation
sampling  normalize, normalize-by-env, group-baseline, scale-negative
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import hookimpl
from ..components import NoOptions, RewardTransformSpec
from ..groups import group_advantages
from ..types import Step


class _Opts(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- final ----------------------------------------------------------------------------------------


def win_draw_loss(rewards: dict[int, float], env_id: str) -> dict[int, float]:
    """+1 for a player whose reward beats every other's, -1 below the best other, 0 on a tie.
    A single player keeps the sign of its reward."""
    out = {}
    for pid, r in rewards.items():
        others = [v for p, v in rewards.items() if p != pid]
        ref = max(others) if others else 0.0
        out[pid] = 1.0 if r > ref else (-1.0 if r < ref else 0.0)
    return out


class RoleAdvantageOptions(_Opts):
    tau: float = Field(0.02, gt=0, le=1, description="EMA rate: baseline <- (1 - tau) * baseline + tau * reward.")
    update_before_read: bool = Field(
        False, description="False (SPIRAL, default): subtract the baseline as it was before this game; True: update first."
    )


class RoleAdvantage:
    """Subtract a per-role (player id) EMA baseline of the final reward. The by-env variant keys
    the baseline by (env_id, player id). Only the seats the learner's model played
    (``train_seats``, which the run passes) update their baseline, as SPIRAL's role-advantage
    estimation learns from its trained players only: a fixed opponent's or a past checkpoint's
    rewards in a seat move nothing; every seat's advantage is still its reward minus its baseline.
    Called without ``train_seats`` every seat counts."""

    def __init__(self, options: RoleAdvantageOptions, by_env: bool) -> None:
        self.tau = options.tau
        self.update_first = options.update_before_read
        self.by_env = by_env
        self.baseline: dict[Hashable, float] = defaultdict(float)

    def __call__(self, rewards: dict[int, float], env_id: str, train_seats: Sequence[int] | None = None) -> dict[int, float]:
        out = {}
        for pid, r in rewards.items():
            key = (env_id, pid) if self.by_env else pid
            old = self.baseline.get(key, 0.0)
            if train_seats is not None and pid not in train_seats:
                out[pid] = r - old  # an opponent's seat: read, never updated
                continue
            new = (1 - self.tau) * old + self.tau * r
            self.baseline[key] = new
            out[pid] = r - (new if self.update_first else old)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"baseline": [[list(k) if isinstance(k, tuple) else k, v] for k, v in self.baseline.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.baseline = defaultdict(float, {(tuple(k) if isinstance(k, list) else k): v for k, v in state["baseline"]})


# -- step -----------------------------------------------------------------------------------------


class RewardForFormatOptions(_Opts):
    reward: float = Field(0.25, description="Added when the completion followed the answer format.")
    penalty: float = Field(-0.25, description="Added when it did not.")
    exact: str | None = Field(None, description="A regular expression the whole completion (stripped) must match to "
                              "count as in format, on top of the template's own check; e.g. a single boxed action "
                              "and nothing else: '\\\\boxed\\{\\[[a-z]+\\]\\}'.")

    @field_validator("exact")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as e:
                raise ValueError(f"not a regular expression: {e}") from None
        return value


class RewardForFormat:
    def __init__(self, options: RewardForFormatOptions) -> None:
        self.o = options
        self.exact = re.compile(options.exact) if options.exact is not None else None

    def __call__(self, step: Step) -> Step:
        ok = step.turn.format_ok and (self.exact is None or self.exact.fullmatch(step.turn.completion.strip()) is not None)
        bonus = self.o.reward if ok else self.o.penalty
        return step.model_copy(update={"reward": step.reward + bonus})


class InvalidMoveOptions(_Opts):
    reward: float = Field(0.0, description="Added to a valid move.")
    penalty: float = Field(-1.0, description="Added to a move the environment rejected.")


class PenaltyForInvalidMove:
    def __init__(self, options: InvalidMoveOptions) -> None:
        self.o = options

    def __call__(self, step: Step) -> Step:
        bonus = self.o.penalty if step.turn.invalid else self.o.reward
        return step.model_copy(update={"reward": step.reward + bonus})


class TruncationOptions(_Opts):
    reward: float = Field(0.0, description="Added to a completion that ended (an end token).")
    penalty: float = Field(-1.0, description="Added to a completion cut at the token limit (max_tokens).")


class PenaltyForTruncation:
    """DAPO's overlong penalty, in its simplest form: an answer that runs into the token limit
    instead of ending is penalised even when the answer it holds was read and played."""

    def __init__(self, options: TruncationOptions) -> None:
        self.o = options

    def __call__(self, step: Step) -> Step:
        bonus = self.o.penalty if step.turn.truncated else self.o.reward
        return step.model_copy(update={"reward": step.reward + bonus})


# -- sampling -------------------------------------------------------------------------------------


class NormalizeOptions(_Opts):
    eps: float = Field(1e-8, gt=0, description="Added to the standard deviation before dividing.")
    subtract_mean: bool = Field(True, description="z-score (True) or divide by the std only (False).")


def zscore(values: list[float], eps: float, subtract_mean: bool = True) -> list[float]:
    """(v - mean) / (std + eps) with the population std; a group with zero variance gives zeros."""
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    std = math.sqrt(var)
    if all(v == values[0] for v in values):
        return [0.0] * n
    return [((v - mean) if subtract_mean else v) / (std + eps) for v in values]


class Normalize:
    def __init__(self, options: NormalizeOptions, by_env: bool) -> None:
        self.o = options
        self.by_env = by_env

    def __call__(self, steps: list[Step]) -> list[Step]:
        groups: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(steps):
            groups[s.env_id if self.by_env else ""].append(i)
        out = list(steps)
        for idx in groups.values():
            normed = zscore([steps[i].reward for i in idx], self.o.eps, self.o.subtract_mean)
            for i, v in zip(idx, normed):
                out[i] = steps[i].model_copy(update={"reward": v})
        return out


class ScaleNegativeOptions(_Opts):
    scale: float = Field(0.0, ge=0.0, le=1.0, description="Factor on every negative advantage: 0 drops those steps "
                         "(with the zero-advantage filter), 1 leaves them as they are.")


class ScaleNegative:
    """Shrinks negative advantages (after ``normalize``): an update then mostly raises the
    probability of what did better than the batch, instead of lowering what did worse. ``scale =
    0`` keeps the positive half only (filtered behaviour cloning, as RAFT and ReST do); on the main
    job it learns as much in fewer, faster updates (docs/learning.md)."""

    def __init__(self, options: ScaleNegativeOptions) -> None:
        self.o = options

    def __call__(self, steps: list[Step]) -> list[Step]:
        return [s.model_copy(update={"reward": s.reward * self.o.scale}) if s.reward < 0 else s for s in steps]


class GroupBaselineOptions(_Opts):
    baseline: Literal["mean", "leave-one-out"] = Field(
        "mean", description="'mean': the mean of the group's games (GRPO, Dr. GRPO); 'leave-one-out': the mean of the "
        "group's other games (RLOO).")
    scale: Literal["none", "std"] = Field("none", description="'std': divide by the group's standard deviation (GRPO); "
                                          "'none': do not (Dr. GRPO, RLOO).")
    eps: float = Field(1e-8, gt=0, description="Added to the standard deviation before dividing.")
    std: Literal["population", "sample"] = Field(
        "population", description="With scale = 'std': the group's population std (divided by the number of games k) "
        "or the sample std (divided by k - 1, torch.std's default, as TRL's and verl's GRPO compute it).")


class GroupBaseline:
    """Each step's reward minus its group's baseline (``unstable_core.groups``)."""

    def __init__(self, options: GroupBaselineOptions) -> None:
        self.o = options

    def __call__(self, steps: list[Step]) -> list[Step]:
        advantages = group_advantages(steps, self.o.baseline, self.o.scale, self.o.eps, self.o.std)
        return [s.model_copy(update={"reward": a}) for s, a in zip(steps, advantages)]


def _spec(name: str, stage: str, summary: str, config: type[BaseModel], factory: Any, **declared: bool) -> RewardTransformSpec:
    return RewardTransformSpec(name=name, stage=stage, summary=summary, config=config, factory=factory, **declared)


@hookimpl
def unstable_reward_transforms() -> list[RewardTransformSpec]:
    return [
        _spec("win-draw-loss", "final", "Final rewards to +1 win / 0 draw / -1 loss", NoOptions, lambda o, ctx: win_draw_loss),
        _spec("role-advantage", "final", "Subtract a per-role EMA baseline (read before update)", RoleAdvantageOptions, lambda o, ctx: RoleAdvantage(o,
            by_env=False)),
        _spec("role-advantage-by-env", "final", "Per-(env, role) EMA baseline", RoleAdvantageOptions, lambda o, ctx: RoleAdvantage(o, by_env=True)),
        _spec("reward-for-format", "step", "Add reward/penalty for the answer format", RewardForFormatOptions, lambda o, ctx: RewardForFormat(o)),
        _spec("penalty-for-invalid-move", "step", "Add penalty to moves the env rejected", InvalidMoveOptions, lambda o, ctx: PenaltyForInvalidMove(o)),
        _spec("penalty-for-truncation", "step", "Add penalty to completions cut at the token limit", TruncationOptions,
              lambda o, ctx: PenaltyForTruncation(o)),
        _spec("normalize", "sampling", "z-score rewards over the batch (std + eps)", NormalizeOptions, lambda o, ctx: Normalize(o, by_env=False),
              mixes_batch=True),
        _spec("normalize-by-env", "sampling", "z-score rewards per env within the batch", NormalizeOptions, lambda o, ctx: Normalize(o, by_env=True),
              mixes_batch=True),
        _spec("group-baseline", "sampling", "Subtract the group's mean (or leave-one-out) reward; optionally divide by its std",
              GroupBaselineOptions, lambda o, ctx: GroupBaseline(o), needs_groups=True),
        _spec("scale-negative", "sampling", "Multiply negative advantages by scale (0 keeps the positive steps only)",
              ScaleNegativeOptions, lambda o, ctx: ScaleNegative(o)),
    ]
