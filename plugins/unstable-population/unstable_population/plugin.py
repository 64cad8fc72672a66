"""Hook implementations of unstable-population (nothing heavy: scipy loads at the first solve)."""

from __future__ import annotations

from unstable_core import InferenceSpec, ModelSamplerSpec, hookimpl

from .mixture import MixtureInference, MixtureModelOptions, check_model
from .samplers import FictitiousOptions, FictitiousSampler, PSROOptions, PSROSampler


@hookimpl
def unstable_model_samplers() -> list[ModelSamplerSpec]:
    return [
        ModelSamplerSpec(name="fictitious", summary="Fictitious self-play: opponents from every checkpoint so far",
                         config=FictitiousOptions, factory=lambda o, ctx: FictitiousSampler(o)),
        ModelSamplerSpec(name="psro", summary="PSRO: opponents from the Nash mixture of the checkpoints' meta-game",
                         config=PSROOptions, factory=lambda o, ctx: PSROSampler(o),
                         exact_payoffs=lambda o: o.payoff == "exact",
                         least_exploitable=lambda o: "least" in (o.meta_solver, o.output)),
    ]


@hookimpl
def unstable_inference_backends() -> list[InferenceSpec]:
    return [InferenceSpec(name="mixture", summary="A run's population as one model: a checkpoint drawn per game from its "
                          "uniform or PSRO meta mixture", factory=lambda o, ctx: MixtureInference(ctx.build),
                          check_model=check_model, model_options=MixtureModelOptions, serves_checkpoints=False)]
