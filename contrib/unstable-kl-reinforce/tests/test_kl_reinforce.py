import pytest
import torch

import unstable_kl_reinforce.plugin as plugin
from unstable_core import Batch, ModelRef, build_component, load_plugins
from unstable_core.testing import make_steps
from unstable_hf.testing import LoraLearnerContract

torch.set_num_threads(1)


class TestKLReinforceContract(LoraLearnerContract):
    plugin = plugin
    name = "kl-reinforce"
    options = {**LoraLearnerContract.options, "kl_coef": 0.5}


@pytest.fixture
def learner(tmp_path_factory):
    def make(**options):
        from unstable_hf.testing import build_fast_tiny

        path = build_fast_tiny(tmp_path_factory.getbasetemp() / "unstable-hf-fast-tiny")
        system = load_plugins(entry_points=False, extra=[("kl-reinforce", plugin)], strict=True)
        opts = {"device": "cpu", "lora": {"rank": 4, "alpha": 8}, **options}
        return build_component("learner", "kl-reinforce", opts, plugins=system, model=ModelRef(uid="base", kind="base", model=path))

    return make


@pytest.mark.parametrize("layout", ["masks", "segments"])  # the reference logprobs in either prefix-shared layout
def test_the_kl_starts_at_zero_and_is_positive_once_the_policy_moved(learner, layout):
    import random

    L = learner(lr=5e-2, kl_coef=0.0, prefix_layout=layout, mini_batch_size=12)
    steps = [s.model_copy(update={"turn": s.turn.model_copy(update={"prompt_token_ids": [7, 8, 9, 10] + s.turn.prompt_token_ids})})
             for s in make_steps(random.Random(0), (3, 300))]  # every prompt starts alike: something to share
    batch = Batch(steps=steps, learner_version=0)
    first = L.update(batch)
    assert first["prefix_share"] > 0 and first["prefix_segments"] == (layout == "segments")
    assert first["kl"] == 0.0  # a fresh adapter (LoRA B = 0) is the base policy
    kls = [L.update(batch)["kl"] for _ in range(3)]
    assert all(kl > 1e-4 for kl in kls), kls


def test_the_penalty_pulls_the_policy_back_to_the_base(learner):
    """With zero rewards only the KL term has a gradient: updates shrink the KL they report (the
    first few still move away, on the optimizer's momentum from the rewarded updates)."""
    import random

    L = learner(lr=5e-2, kl_coef=1.0)
    moving = Batch(steps=make_steps(random.Random(0), (3, 300)), learner_version=0)
    for _ in range(4):
        L.update(moving)
    still = Batch(steps=[s.model_copy(update={"reward": 0.0}) for s in moving.steps], learner_version=4)
    kls = [L.update(still)["kl"] for _ in range(14)]
    assert max(kls[-3:]) < 0.5 * max(kls[:3]), kls


def test_a_learner_without_a_model_is_refused_with_a_clear_message():
    from unstable_core import UnstableError

    system = load_plugins(entry_points=False, extra=[("kl-reinforce", plugin)], strict=True)
    with pytest.raises(UnstableError, match=r"kl-reinforce learner needs \[model\] model"):
        build_component("learner", "kl-reinforce", {}, plugins=system)
