import unstable_reinforce.plugin as plugin
from unstable_hf.testing import LoraLearnerContract


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
        import pytest

        pytest.skip("the importance weight is a detached factor: finite differences see it move")
