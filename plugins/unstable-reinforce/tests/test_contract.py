import pytest

import unstable_hf.plugin as hf_plugin
import unstable_reinforce.plugin as plugin
from unstable_core import LearnerSpec, ModelRef, hookimpl, load_plugins
from unstable_hf.testing import DIRECTION_TINY, LoraLearnerContract, build_fast_tiny


class TestReinforceContract(LoraLearnerContract):
    plugin = plugin
    name = "reinforce"
    options = {**LoraLearnerContract.options, "normalizer": "tokens"}


class TestReinforceWithImportanceSamplingContract(LoraLearnerContract):
    """The truncated IS weight is detached from the graph, so the gradient check does not apply
    to it: the other checks do."""

    plugin = plugin
    name = "reinforce"
    options = {**LoraLearnerContract.options, "importance_sampling": True}

    def test_loss_gradient_matches_float64_finite_differences(self):
        pytest.skip("the importance weight is a detached factor: finite differences see it move")


class WrongWay:
    """A plugin with two broken REINFORCE learners: one with its sign flipped (it learns to lose),
    one that ignores the advantage (it imitates whatever it sampled)."""

    @staticmethod
    def learners():
        from unstable_reinforce.learner import ReinforceLearner

        class Flipped(ReinforceLearner):
            def loss(self, steps, batch_size):
                loss, stats = super().loss(steps, batch_size)
                return -loss, stats

        class IgnoresAdvantage(ReinforceLearner):
            def loss(self, steps, batch_size):
                return super().loss([s.model_copy(update={"reward": 1.0}) for s in steps], batch_size)

        return {"flipped-reinforce": Flipped, "blind-reinforce": IgnoresAdvantage}

    @hookimpl
    def unstable_learners(self):
        from unstable_reinforce.options import ReinforceOptions

        return [LearnerSpec(name=name, summary="broken on purpose", config=ReinforceOptions,
                            factory=lambda o, ctx, cls=cls: cls(o, ctx.model.model, seed=ctx.seed))
                for name, cls in self.learners().items()]


def test_a_learner_that_learns_the_wrong_way_fails_the_contract(tmp_path_factory):
    """The contract's direction check fails REINFORCE with its sign flipped and REINFORCE that
    ignores the advantage (the learner they are made from passes it: TestReinforceContract)."""
    path = build_fast_tiny(tmp_path_factory.getbasetemp() / "unstable-hf-fast-tiny", DIRECTION_TINY)
    model = ModelRef(uid="base", kind="base", backend="hf", model=path)
    system = load_plugins(entry_points=False, extra=[("wrong-way", WrongWay()), ("unstable_hf.plugin", hf_plugin)], strict=True)
    for name in ("flipped-reinforce", "blind-reinforce"):
        contract = type("Contract", (LoraLearnerContract,), {"name": name})()
        with pytest.raises(AssertionError, match="does not raise the probability of what is rewarded"):
            contract.test_learning_goes_the_right_way(system.get("learner", name), system, tmp_path_factory.mktemp(name), model)
