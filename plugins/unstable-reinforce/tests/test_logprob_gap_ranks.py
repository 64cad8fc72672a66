"""The logprob gap of a data-parallel learner is the whole batch's: two ranks report what one
learner reports (tokens summed, mean over all of them, the largest of the ranks' max)."""

import pytest
import torch
from transformers import AutoTokenizer

from unstable_core import Batch
from unstable_hf.data_parallel import shard
from unstable_hf.testing import base_logprobs, self_play_steps
from unstable_reinforce.learner import ReinforceLearner
from unstable_reinforce.options import ReinforceOptions

torch.set_num_threads(1)


def learner(tiny_path, parallel):
    options = ReinforceOptions(device="cpu", dtype="float64", lr=5e-3, max_generation_len=16, mini_batch_size=4,
                               lora={"rank": 4, "alpha": 8}, data_parallel=parallel)
    return ReinforceLearner(options, tiny_path, seed=3)


def test_two_ranks_report_the_gap_one_learner_reports(tiny_path):
    steps = self_play_steps(AutoTokenizer.from_pretrained(tiny_path), n=16, seed=5)
    exact = base_logprobs(tiny_path, [(s.turn.prompt_token_ids, s.turn.completion_token_ids) for s in steps])
    second = {(s.game_idx, s.player_id, s.turn_index) for s in shard(steps, 2)[1]}  # rank 1's shard
    shifted = [(s.game_idx, s.player_id, s.turn_index) in second for s in steps]  # rank 0 alone would see no gap
    assert 0 < sum(shifted) < len(steps)
    steps = [s.model_copy(update={"turn": s.turn.model_copy(update={"policy_version": 0, "logprobs": [x + 0.1 * k for x in old]})})
             for s, old, k in zip(steps, exact, shifted)]
    tokens = sum(len(s.turn.completion_token_ids) for s in steps)
    off = sum(len(s.turn.completion_token_ids) for s, k in zip(steps, shifted) if k)
    single = learner(tiny_path, 1).update(Batch(steps=steps, learner_version=0))
    two = learner(tiny_path, 2)
    try:
        parallel = two.update(Batch(steps=steps, learner_version=0))
    finally:
        two.close()
    assert single["logprob_gap_tokens"] == parallel["logprob_gap_tokens"] == tokens
    assert single["logprob_gap_mean"] == pytest.approx(0.1 * off / tokens, abs=1e-5)
    assert parallel["logprob_gap_mean"] == pytest.approx(single["logprob_gap_mean"], rel=1e-9)
    assert single["logprob_gap_max"] == pytest.approx(0.1, abs=1e-5)
    assert parallel["logprob_gap_max"] == pytest.approx(single["logprob_gap_max"], rel=1e-9)
