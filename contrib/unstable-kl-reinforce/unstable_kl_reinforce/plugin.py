"""Hook implementations: nothing heavy is imported here (``unstable plugins list`` imports it)."""

from unstable_core import BuildContext, ChosenComponents, LearnerSpec, UnstableError, hookimpl
from unstable_hf.options import check_learner, lora_adapter

from .options import KLReinforceOptions


def make_learner(options: KLReinforceOptions, ctx: BuildContext) -> object:
    if ctx.model is None or not ctx.model.model:
        raise UnstableError("the kl-reinforce learner needs [model] model = ... (the model being trained)")
    from .learner import KLReinforce

    return KLReinforce(options, ctx.model.model, seed=ctx.seed)


def check_kl_learner(options: KLReinforceOptions, components: ChosenComponents) -> None:
    """``check_learner``, and ``kl_estimator = "k1-score"`` only with the constant normaliser: the
    reward-to-go form is the gradient of KL(pi || ref) when every token of a completion is divided
    by the same number; ``normalizer = "tokens"`` weighs each completion by 1 / its length, which
    breaks it (the estimate is then of no KL's gradient)."""
    check_learner(options, components)
    if options.kl_estimator == "k1-score" and options.normalizer == "tokens":
        raise ValueError('kl_estimator = "k1-score" with normalizer = "tokens": dividing each completion by its own '
                         'length breaks the reward-to-go identity that makes it the gradient of KL(pi || ref); set '
                         'normalizer = "max_generation_len" or kl_estimator = "k3"')


@hookimpl
def unstable_learners() -> list[LearnerSpec]:
    return [LearnerSpec(name="kl-reinforce", summary="REINFORCE with a KL penalty to the frozen base policy",
                        config=KLReinforceOptions, factory=make_learner, blocking=True,
                        drop_zero_advantage=False,  # a zero-reward step still carries the KL gradient
                        adapter=lora_adapter, check_run=check_kl_learner)]
