"""Hook implementations (no heavy imports here)."""

from __future__ import annotations

from typing import Any

from unstable_core import BuildContext, LearnerSpec, UnstableError, hookimpl
from unstable_hf.options import check_learner, lora_adapter

from .options import A2COptions


def make_learner(options: A2COptions, ctx: BuildContext) -> Any:
    if ctx.model is None or not ctx.model.model:
        raise UnstableError("the a2c learner needs [model] model = ... (the model being trained)")
    from .learner import A2CLearner

    return A2CLearner(options, ctx.model.model, seed=ctx.seed)


@hookimpl
def unstable_learners() -> list[LearnerSpec]:
    return [
        LearnerSpec(
            name="a2c",
            summary="Advantage actor-critic on LoRA: a critic at the last prompt token, GAE over each player's turns",
            config=A2COptions,
            factory=make_learner,
            blocking=True,
            drop_zero_advantage=False,  # draws and zero rewards teach the critic
            computes_advantages=True,  # GAE with a critic: no sampling transforms
            needs_episodes=True,  # returns over a seat's turns
            adapter=lora_adapter,
            check_run=check_learner,  # 'cuda' needs a GPU here (local executor); temperature = the sampling one
        )
    ]
