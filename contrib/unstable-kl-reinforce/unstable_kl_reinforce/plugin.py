"""Hook implementations: nothing heavy is imported here (``unstable plugins list`` imports it)."""

from unstable_core import BuildContext, LearnerSpec, UnstableError, hookimpl
from unstable_hf.options import check_learner, lora_adapter

from .options import KLReinforceOptions


def make_learner(options: KLReinforceOptions, ctx: BuildContext) -> object:
    if ctx.model is None or not ctx.model.model:
        raise UnstableError("the kl-reinforce learner needs [model] model = ... (the model being trained)")
    from .learner import KLReinforce

    return KLReinforce(options, ctx.model.model, seed=ctx.seed)


@hookimpl
def unstable_learners() -> list[LearnerSpec]:
    return [LearnerSpec(name="kl-reinforce", summary="REINFORCE with a KL penalty to the frozen base policy",
                        config=KLReinforceOptions, factory=make_learner, blocking=True,
                        drop_zero_advantage=False,  # a zero-reward step still carries the KL gradient
                        adapter=lora_adapter, check_run=check_learner)]
