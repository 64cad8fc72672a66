"""Hook implementations (no heavy imports here)."""

from __future__ import annotations

from typing import Any

from unstable_core import BuildContext, LearnerSpec, UnstableError, hookimpl
from unstable_hf.options import check_learner, lora_adapter

from .options import ReinforceOptions


def make_learner(options: ReinforceOptions, ctx: BuildContext) -> Any:
    from .learner import ReinforceLearner

    if ctx.model is None or not ctx.model.model:
        raise UnstableError("the reinforce learner needs [model] model = ... (the model being trained)")
    return ReinforceLearner(options, ctx.model.model, seed=ctx.seed)


@hookimpl
def unstable_learners() -> list[LearnerSpec]:
    return [
        LearnerSpec(
            name="reinforce",
            summary="REINFORCE on LoRA: -advantage x sum of completion-token logprobs / normaliser",
            config=ReinforceOptions,
            factory=make_learner,
            blocking=True,  # the update runs in a worker thread while games go on
            drop_zero_advantage=True,  # a zero advantage carries no REINFORCE gradient
            adapter=lora_adapter,
            check_run=check_learner,  # 'cuda' needs a GPU here (local executor); temperature = the sampling one
        )
    ]
