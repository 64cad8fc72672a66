"""The consistency matrix of KL-regularised REINFORCE (``unstable_hf.testing``): under every
packing (padded rows, prefix-shared 'masks' and 'segments', gradient checkpointing off and on),
the reference logprobs (the adapter off) computed in the same packing, the loss gradient with the
k3 penalty equals central differences of the same loss (float64 model), and with k1-score the
padded float64 gradient; with each estimator two data-parallel
ranks end where one learner ends, to 1e-10. One cell runs in the default suite, the rest with
``UNSTABLE_MATRIX=1 pytest -m matrix``."""

import pytest
import torch

from unstable_core import Batch
from unstable_hf.testing import (
    MATRIX,
    PACKINGS,
    batch_loss,
    build_fast_tiny,
    check_directional_derivatives,
    max_weight_diff,
    packing_id,
    randomize_trainable,
    trainable_copy,
    updates_of_ranks,
    whole_games,
)
from unstable_kl_reinforce.learner import KLReinforce
from unstable_kl_reinforce.options import KLReinforceOptions

torch.set_num_threads(1)
FAST = ("k3", (True, True, "masks"))  # the cell the default suite runs


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_fast_tiny(tmp_path_factory.getbasetemp() / "unstable-hf-fast-tiny")


def build(tiny_path, **options):
    base = {"device": "cpu", "dtype": "float64", "lora": {"rank": 4, "alpha": 8}, "max_generation_len": 16, "mini_batch_size": 8,
            "lr": 5e-3, "kl_coef": 0.5, "data_parallel_timeout_s": 120}
    return KLReinforce(KLReinforceOptions(**{**base, **options}), tiny_path, seed=0)


def build_packed(tiny_path, estimator, packing):
    checkpointing, shared, layout = packing
    L = build(tiny_path, kl_estimator=estimator, gradient_checkpointing=checkpointing, prefix_sharing=shared, prefix_layout=layout)
    assert L.model.get_base_model().model.gradient_checkpointing == checkpointing
    assert L.layout == (("masks" if checkpointing else layout) if shared else "padded")
    randomize_trainable(L, scale=0.05)  # the policy away from the reference: the KL term has a gradient
    return L


@pytest.mark.parametrize("packing", [pytest.param(p, id=packing_id(p), marks=() if ("k3", p) == FAST else MATRIX) for p in PACKINGS])
def test_the_k3_gradient_equals_finite_differences(tiny_path, packing):
    L = build_packed(tiny_path, "k3", packing)
    check_directional_derivatives(L, whole_games(tiny_path, n=24))


def gradient(L, steps):
    if L.shared:
        steps = sorted(steps, key=lambda s: s.turn.prompt_token_ids + s.turn.completion_token_ids)
    L.model.train()
    batch_loss(L, steps).backward()
    return {n: p.grad.clone() for n, p in L.trainable().items()}


@pytest.mark.parametrize("packing", [pytest.param(p, id=packing_id(p), marks=MATRIX) for p in PACKINGS[1:]])
def test_the_k1_score_gradient_equals_the_padded_float64_one(tiny_path, packing):
    """k1-score's loss holds a detached factor that depends on the weights (the log-ratio to go):
    finite differences of it are not its gradient. Its reference is the gradient on padded rows
    without checkpointing; where steps share a prefix, Qwen3's RMSNorm rounds their summed
    gradient at float32 (plugins/unstable-hf/tests/test_prefix.py): within 1e-6 of the largest."""
    steps = whole_games(tiny_path, n=24)
    reference = gradient(build_packed(tiny_path, "k1-score", PACKINGS[0]), steps)
    found = gradient(build_packed(tiny_path, "k1-score", packing), steps)
    scale = max(float(g.abs().max()) for g in reference.values())
    assert scale > 0
    for name in reference:
        assert float((found[name] - reference[name]).abs().max()) <= 1e-6 * scale, name


@pytest.mark.parametrize("estimator", [pytest.param(e, marks=MATRIX) for e in ("k3", "k1-score")])
def test_two_ranks_end_where_one_learner_ends(tiny_path, estimator):
    """Two updates on batches of whole games, checkpointing and prefix-shared masks on, each step
    a chunk of its own (the same shapes on either side)."""
    steps = whole_games(tiny_path, n=32, seed=5)
    half = sorted({s.game_idx for s in steps})[len({s.game_idx for s in steps}) // 2]
    batches = [Batch(steps=[s for s in steps if s.game_idx < half], learner_version=0),
               Batch(steps=[s for s in steps if s.game_idx >= half], learner_version=1)]

    def make(**more):
        return build(tiny_path, kl_estimator=estimator, mini_batch_size=1, gradient_checkpointing=True, prefix_sharing=True, **more)

    one, single = updates_of_ranks(make, batches, 1)
    two, parallel = updates_of_ranks(make, batches, 2)
    assert max_weight_diff(one, trainable_copy(make())) > 1e-3  # it learned something
    assert max_weight_diff(two, one) < 1e-10
    for a, b in zip(single, parallel):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-9, abs=1e-12)
