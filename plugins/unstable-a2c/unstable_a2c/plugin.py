"""Hook implementations (no heavy imports here)."""

from __future__ import annotations

from typing import Any

from unstable_core import BuildContext, LearnerSpec, UnstableError, hookimpl
from unstable_hf.options import lora_adapter

from .options import A2COptions


def make_learner(options: A2COptions, ctx: BuildContext) -> Any:
    if ctx.model is None or not ctx.model.model:
        raise UnstableError("the a2c learner needs [model] model = ... (the model being trained)")
    sampling = (ctx.config.get("reward") or {}).get("sampling") or []
    if sampling:
        names = ", ".join(str(t.get("name", t)) if isinstance(t, dict) else str(t) for t in sampling)
        raise UnstableError(f"the a2c learner computes its own advantages (GAE with a critic): remove the [reward] "
                            f"sampling transforms ({names}), which rewrite the rewards it reads")
    buffer = (ctx.config.get("buffer") or {}).get("name")
    if buffer == "step":
        raise UnstableError('the a2c learner needs whole episodes in each batch: set [buffer] name = "episode"')
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
            adapter=lora_adapter,
        )
    ]
