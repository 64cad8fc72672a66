"""Hook implementations of unstable-population (nothing heavy: scipy loads at the first solve)."""

from __future__ import annotations

from unstable_core import ModelSamplerSpec, hookimpl

from .samplers import FictitiousOptions, FictitiousSampler, PSROOptions, PSROSampler


@hookimpl
def unstable_model_samplers() -> list[ModelSamplerSpec]:
    return [
        ModelSamplerSpec(name="fictitious", summary="Fictitious self-play: opponents from every checkpoint so far",
                         config=FictitiousOptions, factory=lambda o, ctx: FictitiousSampler(o)),
        ModelSamplerSpec(name="psro", summary="PSRO: opponents from the Nash mixture of the checkpoints' meta-game",
                         config=PSROOptions, factory=lambda o, ctx: PSROSampler(o)),
    ]
