"""The consistency matrix of A2C (``unstable_hf.testing``): with each critic kind, the loss
gradient along the policy's weights and along the critic's equals central differences of the same
loss (float64 model, what ``prepare`` computed held fixed) under every packing (padded rows,
prefix-shared 'masks' and 'segments', gradient checkpointing off and on); and two data-parallel
ranks end where one learner ends, to 1e-10, with each critic. One cell runs in the default suite,
the rest with ``UNSTABLE_MATRIX=1 pytest -m matrix`` (padded rows without prefix sharing:
tests/test_gradients.py, tests/test_data_parallel.py)."""

import pytest
import torch
from transformers import AutoTokenizer

from unstable_a2c.learner import A2CLearner
from unstable_a2c.options import A2COptions
from unstable_core import Batch
from unstable_hf.testing import (
    MATRIX,
    PACKINGS,
    check_directional_derivatives,
    max_weight_diff,
    packing_id,
    randomize_trainable,
    trainable_copy,
    updates_of_ranks,
    whole_games,
)

torch.set_num_threads(1)
FAST = ("adapter", (True, True, "masks"))  # the cell the default suite runs


def build(tiny_path, **options):
    base = {"device": "cpu", "dtype": "float64", "lora": {"rank": 4, "alpha": 8}, "gamma": 0.9, "gae_lambda": 0.8,
            "max_generation_len": 16, "mini_batch_size": 8, "lr": 5e-3, "critic_lr": 2e-2, "data_parallel_timeout_s": 120}
    return A2CLearner(A2COptions(**{**base, **options}), tiny_path, seed=0)


CELLS = [pytest.param(c, p, id=f"{c}-{packing_id(p)}", marks=() if (c, p) == FAST else MATRIX)
         for c in ("adapter", "model") for p in PACKINGS]


@pytest.mark.parametrize(("critic", "packing"), CELLS)
def test_the_gradient_equals_finite_differences(tiny_path, critic, packing):
    checkpointing, shared, layout = packing
    L = build(tiny_path, critic=critic, gradient_checkpointing=checkpointing, prefix_sharing=shared, prefix_layout=layout)
    assert L.model.get_base_model().model.gradient_checkpointing == checkpointing
    assert L.layout == (("masks" if checkpointing else layout) if shared else "padded")
    randomize_trainable(L)
    found = check_directional_derivatives(L, whole_games(AutoTokenizer.from_pretrained(tiny_path), n=24))
    assert sorted(found) == ["critic", "policy"]


@pytest.mark.parametrize("critic", [pytest.param(c, marks=MATRIX) for c in ("adapter", "model")])
def test_two_ranks_end_where_one_learner_ends(tiny_path, critic):
    """Two updates (the first moves the critic off zero) on batches of whole games, checkpointing
    and prefix-shared masks on, each step a chunk of its own (the same shapes on either side)."""
    steps = whole_games(AutoTokenizer.from_pretrained(tiny_path), n=32, seed=5)
    half = sorted({s.game_idx for s in steps})[len({s.game_idx for s in steps}) // 2]
    batches = [Batch(steps=[s for s in steps if s.game_idx < half], learner_version=0),
               Batch(steps=[s for s in steps if s.game_idx >= half], learner_version=1)]

    def make(**more):
        return build(tiny_path, critic=critic, mini_batch_size=1, gradient_checkpointing=True, prefix_sharing=True, **more)

    one, single = updates_of_ranks(make, batches, 1)
    two, parallel = updates_of_ranks(make, batches, 2)
    assert max_weight_diff(one, trainable_copy(make())) > 1e-3  # it learned something
    assert max_weight_diff(two, one) < 1e-10
    for a, b in zip(single, parallel):
        for key in ("loss", "explained_variance", "value_mean"):
            assert b[key] == pytest.approx(a[key], rel=1e-9, abs=1e-12), key
