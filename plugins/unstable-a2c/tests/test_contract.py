import unstable_a2c.plugin as plugin
from unstable_hf.testing import LoraLearnerContract


class TestA2CContract(LoraLearnerContract):
    """Two optimizers (policy, critic), one step each per update; the gradient check covers the
    policy's and the critic's LoRA weights and the value head (the advantages and returns that
    ``prepare`` computed are held fixed, as in the update)."""

    plugin = plugin
    name = "a2c"
    options = {**LoraLearnerContract.options, "critic_lr": 1e-2, "gamma": 0.9, "gae_lambda": 0.8}
    gradient_coordinates = 16


class TestA2CSeparateCriticModelContract(LoraLearnerContract):
    plugin = plugin
    name = "a2c"
    options = {**LoraLearnerContract.options, "critic": "model", "critic_lr": 1e-2, "value_clip": 0.5,
               "normalize_advantages": False}
    gradient_coordinates = 16
