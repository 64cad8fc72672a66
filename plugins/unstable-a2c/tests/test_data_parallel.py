"""A2C with ``data_parallel = 2`` (two learner processes, gloo, each on a shard of whole games)
ends where one learner on the whole batch ends: the advantages are z-scored over the whole batch
(not each shard), the negative ones scaled after that, and the logged statistics
(``explained_variance``, the means) are the batch's. float64, each step forwarded alone
(``mini_batch_size = 1``, no prefix sharing: the same shapes in both runs, see
plugins/unstable-reinforce/tests/test_data_parallel.py)."""

import pytest
import torch
from transformers import AutoTokenizer

from unstable_a2c.learner import A2CLearner
from unstable_a2c.options import A2COptions
from unstable_core import Batch
from unstable_hf.testing import max_weight_diff, self_play_steps, trainable_copy

torch.set_num_threads(1)
STATS = ("explained_variance", "value_mean", "return_mean", "gae_advantage_mean", "loss")


def game_batches(tiny_path, games=(5, 5)):
    """Consecutive batches of whole games of scripted Kuhn Poker self-play (``games[i]`` games in
    the i-th)."""
    steps = self_play_steps(AutoTokenizer.from_pretrained(tiny_path), "KuhnPoker-v0-train", n=8 * sum(games) + 8, seed=5)
    out, first = [], 0
    for i, n in enumerate(games):
        out.append(Batch(steps=[s for s in steps if first <= s.game_idx < first + n], learner_version=i))
        first += n
    assert first <= steps[-1].game_idx  # every batch holds whole games
    return out


def learner(tiny_path, parallel, **extra):
    options = A2COptions(device="cpu", dtype="float64", lr=5e-3, critic_lr=2e-2, max_generation_len=16, gamma=0.9,
                         gae_lambda=0.8, lora={"rank": 4, "alpha": 8}, mini_batch_size=1, prefix_sharing=False,
                         data_parallel=parallel, data_parallel_timeout_s=120, **extra)
    return A2CLearner(options, tiny_path, seed=3)


def run(tiny_path, parallel, data, **extra):
    L = learner(tiny_path, parallel, **extra)
    try:
        before = trainable_copy(L)
        metrics = [L.update(b) for b in data]
        return before, trainable_copy(L), metrics
    finally:
        L.close()


@pytest.mark.parametrize("extra", [{}, {"negative_advantage_scale": 0.5}], ids=["z-scored", "negatives-halved"])
def test_two_ranks_end_where_one_learner_on_the_whole_batch_ends(tiny_path, extra):
    """Two updates (the first moves the critic off zero, so the second's values and explained
    variance are not trivial); the policy's adapter, the critic's adapter and the value head."""
    data = game_batches(tiny_path)
    start, one, single = run(tiny_path, 1, data, **extra)
    _, two, parallel = run(tiny_path, 2, data, **extra)
    assert max_weight_diff(one, start) > 1e-3  # it learned something
    assert any(name.startswith("value_head") for name in one)
    assert max_weight_diff(two, one) < 1e-10
    assert abs(single[1]["explained_variance"]) > 1e-3
    for a, b in zip(single, parallel):
        for key in STATS:
            assert b[key] == pytest.approx(a[key], rel=1e-9, abs=1e-12), key


def test_a_rank_without_a_game_takes_part_in_the_batch_statistics(tiny_path):
    """A batch of one game: rank 1's shard is empty; it still takes the step of the whole batch."""
    data = game_batches(tiny_path, games=(1,))
    _, one, single = run(tiny_path, 1, data)
    _, two, parallel = run(tiny_path, 2, data)
    assert max_weight_diff(two, one) < 1e-10
    for key in STATS:
        assert parallel[0][key] == pytest.approx(single[0][key], rel=1e-9, abs=1e-12), key
