"""The consistency matrix of REINFORCE (``unstable_hf.testing``): the loss gradient equals central
differences of the same loss on a float64 model under every packing (padded rows, prefix-shared
'masks' and 'segments', gradient checkpointing off and on) for plain REINFORCE, a later PPO pass
with importance sampling (``epochs = 2``, ``clip_ratio``: the pass's IS weight and the ratio's
reference are the first pass's, held fixed) and choice answers with importance sampling (every row
of a decision weighed by its ``pi(c) / pi_old(c)``, held fixed by ``prepare``); and two data-parallel
ranks end where one learner ends, to 1e-10, in each variant. One cell runs in the default suite,
the rest with ``UNSTABLE_MATRIX=1 pytest -m matrix``."""

import pytest
import torch
from transformers import AutoTokenizer

from unstable_core import Batch
from unstable_hf.testing import (
    MATRIX,
    PACKINGS,
    check_directional_derivatives,
    choice_rows,
    max_weight_diff,
    off_policy,
    packing_id,
    randomize_trainable,
    trainable_copy,
    updates_of_ranks,
    whole_games,
)
from unstable_reinforce.learner import ReinforceLearner
from unstable_reinforce.options import ReinforceOptions

torch.set_num_threads(1)

#: variant -> (options, later PPO pass, steps made how)
VARIANTS = {
    "plain": ({}, False, "plain"),
    "ppo-is": ({"epochs": 2, "clip_ratio": 0.2, "importance_sampling": True, "is_cap": 1.2}, True, "off-policy"),
    "choice-is": ({"importance_sampling": True, "is_cap": 1.2}, False, "choice"),
}
FAST = ("ppo-is", (True, True, "masks"))  # the cell the default suite runs


def steps_for(tiny_path, how, n=24):
    """Whole games of self-play with rollout logprobs off the model's; as choice rows (three a
    step: fewer steps)."""
    n = n * 2 // 3 if how == "choice" else n
    steps = off_policy(tiny_path, whole_games(AutoTokenizer.from_pretrained(tiny_path), n=n, seed=2), seed=1)
    return choice_rows(steps, seed=3) if how == "choice" else steps


def build(tiny_path, **options):
    base = {"device": "cpu", "dtype": "float64", "lora": {"rank": 4, "alpha": 8}, "max_generation_len": 16, "mini_batch_size": 8,
            "lr": 5e-3, "data_parallel_timeout_s": 120}
    return ReinforceLearner(ReinforceOptions(**{**base, **options}), tiny_path, seed=0)


CELLS = [pytest.param(v, p, id=f"{v}-{packing_id(p)}", marks=() if (v, p) == FAST else MATRIX) for v in VARIANTS for p in PACKINGS]


@pytest.mark.parametrize(("variant", "packing"), CELLS)
def test_the_gradient_equals_finite_differences(tiny_path, variant, packing):
    options, later_pass, how = VARIANTS[variant]
    checkpointing, shared, layout = packing
    L = build(tiny_path, gradient_checkpointing=checkpointing, prefix_sharing=shared, prefix_layout=layout, **options)
    assert L.model.get_base_model().model.gradient_checkpointing == checkpointing
    assert L.layout == (("masks" if checkpointing else layout) if shared else "padded")
    randomize_trainable(L)
    steps = steps_for(tiny_path, how)
    if how == "choice":
        assert len(steps) > 24 and "choice_ratio_mean" in L.prepare_batch(steps)
    check_directional_derivatives(L, steps, later_pass=later_pass)


@pytest.mark.parametrize("variant", [pytest.param(v, marks=MATRIX) for v in VARIANTS])
def test_two_ranks_end_where_one_learner_ends(tiny_path, variant):
    """Two updates on batches of whole games, checkpointing and prefix-shared masks on; each step
    a chunk of its own (the same shapes on either side: Qwen3's RMSNorm rounds at float32, so
    other packings agree to about 1e-8 only; padded rows: tests/test_data_parallel.py)."""
    packing = (True, True, "masks")
    options, _later, how = VARIANTS[variant]
    checkpointing, shared, layout = packing
    steps = steps_for(tiny_path, how, n=32)
    games = sorted({s.game_idx for s in steps})
    half = games[len(games) // 2]
    batches = [Batch(steps=[s for s in steps if s.game_idx < half], learner_version=0),
               Batch(steps=[s for s in steps if s.game_idx >= half], learner_version=1)]

    def make(**more):
        return build(tiny_path, mini_batch_size=1, gradient_checkpointing=checkpointing, prefix_sharing=shared, prefix_layout=layout,
                     **options, **more)

    one, single = updates_of_ranks(make, batches, 1)
    two, parallel = updates_of_ranks(make, batches, 2)
    assert max_weight_diff(one, trainable_copy(make())) > 1e-3  # it learned something
    assert max_weight_diff(two, one) < 1e-10
    for a, b in zip(single, parallel):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-9, abs=1e-12)
