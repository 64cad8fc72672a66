"""env sampler `uniform`; model samplers `mirror`, `fixed`, `lagged`, `random` (UnstableBaselines v0.1).

A model sampler picks the opponents that sit with an *anchor*: the current checkpoint in a
training game, or a uniformly drawn agent in a tournament.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import hookimpl
from ..components import EnvSamplerSpec, ModelSamplerSpec
from ..types import EnvSpec, ModelRef


class UniformEnvOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weighted: bool = Field(True, description="Use each EnvSpec's `weight`; False ignores weights.")


class UniformEnvSampler:
    def __init__(self, options: UniformEnvOptions) -> None:
        self.weighted = options.weighted

    def sample(self, envs: Sequence[EnvSpec], rng: random.Random) -> EnvSpec:
        if len(envs) == 1:
            return envs[0]
        if not envs:
            raise ValueError("no training environments configured")
        weights = [e.weight for e in envs] if self.weighted else None
        return rng.choices(list(envs), weights=weights, k=1)[0]


class MirrorSampler:
    """Every opponent seat is the anchor itself (pure self-play)."""

    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        return [anchor] * num_seats


class FixedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exclude_anchor: bool = Field(True, description="Never seat the anchor against itself (matters in tournaments).")


class FixedSampler:
    """Opponents drawn uniformly from the fixed opponents."""

    def __init__(self, options: FixedOptions) -> None:
        self.exclude_anchor = options.exclude_anchor

    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        pool = [r for r in registry.fixed() if not (self.exclude_anchor and r.uid == anchor.uid)] or registry.fixed()
        if not pool:
            raise ValueError("the fixed model sampler needs [[opponents]]")
        return [rng.choice(pool) for _ in range(num_seats)]


class LaggedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lag_min: int = Field(1, ge=0, description="Smallest lag, in checkpoints behind the current one.")
    lag_max: int = Field(7, ge=0, description="Largest lag; clamped to the oldest checkpoint (the base model).")


class LaggedSampler:
    """Opponents are past checkpoints, a uniformly drawn number of checkpoints behind."""

    def __init__(self, options: LaggedOptions) -> None:
        if options.lag_max < options.lag_min:
            raise ValueError("lagged: lag_max must be >= lag_min")
        self.lo, self.hi = options.lag_min, options.lag_max

    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        history = registry.checkpoints()
        if not history:
            return [anchor] * num_seats
        pos = next((i for i, r in enumerate(history) if r.uid == anchor.uid), len(history) - 1)
        return [history[max(0, pos - rng.randint(self.lo, self.hi))] for _ in range(num_seats)]


class RandomOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fixed_prob: float = Field(0.5, ge=0, le=1, description="Probability that a seat gets a fixed opponent; otherwise a checkpoint.")
    max_active: int | None = Field(None, ge=1, description="Only the last N checkpoints are eligible.")


class RandomSampler:
    """Each seat: a fixed opponent with probability `fixed_prob`, else a uniformly drawn checkpoint."""

    def __init__(self, options: RandomOptions) -> None:
        self.p = options.fixed_prob
        self.max_active = options.max_active

    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        fixed = registry.fixed()
        ckpts = registry.active_checkpoints(self.max_active) or [anchor]
        out = []
        for _ in range(num_seats):
            use_fixed = fixed and rng.random() < self.p
            out.append(rng.choice(fixed) if use_fixed else rng.choice(ckpts))
        return out


@hookimpl
def unstable_env_samplers() -> list[EnvSamplerSpec]:
    return [
        EnvSamplerSpec(
            name="uniform",
            summary="Uniform over training envs (weighted by EnvSpec.weight)",
            config=UniformEnvOptions,
            factory=lambda o, ctx: UniformEnvSampler(o),
        )
    ]


@hookimpl
def unstable_model_samplers() -> list[ModelSamplerSpec]:
    return [
        ModelSamplerSpec(name="mirror", summary="Self-play: every seat is the current model", factory=lambda o, ctx: MirrorSampler()),
        ModelSamplerSpec(name="fixed", summary="Opponents uniformly from the fixed opponents", config=FixedOptions, factory=lambda o, ctx: FixedSampler(o)),
        ModelSamplerSpec(name="lagged", summary="Past checkpoints, lag drawn uniformly in [lag_min, lag_max]", config=LaggedOptions, factory=lambda o,
            ctx: LaggedSampler(o)),
        ModelSamplerSpec(name="random", summary="Fixed opponent with probability fixed_prob, else a checkpoint", config=RandomOptions, factory=lambda o,
            ctx: RandomSampler(o)),
    ]
