"""``data_parallel = 2``: two learner processes (gloo), each on a shard of every batch, end where
one learner on the whole batch ends (float64, 1e-10); checkpoints come from rank 0; a state
loaded into rank 0 reaches the other rank.

The exact comparison forwards each step alone (``mini_batch_size = 1``, no prefix sharing), so
every step's gradient is computed on the same shapes in both runs: Qwen3's RMSNorm computes in
float32 even in a float64 model, so a float64 difference of one ulp from another packing (other
matrix shapes) can round to another float32, about 1e-8 relative. With prefix sharing the shards
pack otherwise than the whole batch, and agreement is to that precision."""

import sys
import types

import pytest
import torch
from transformers import AutoTokenizer

from unstable_core import UnstableError
from unstable_hf.data_parallel import shard
from unstable_hf.testing import max_weight_diff, self_play_batches, trainable_copy
from unstable_reinforce.learner import ReinforceLearner
from unstable_reinforce.options import ReinforceOptions


def batches(tiny_path, n=3):
    return self_play_batches(AutoTokenizer.from_pretrained(tiny_path), n, 24, seed=5)


def learner(tiny_path, parallel, **extra):
    extra = {"mini_batch_size": 1, "prefix_sharing": False, **extra}
    options = ReinforceOptions(device="cpu", dtype="float64", lr=5e-3, max_generation_len=16,
                               lora={"rank": 4, "alpha": 8}, data_parallel=parallel, **extra)
    return ReinforceLearner(options, tiny_path, seed=3)


def test_shards_keep_games_whole_and_cover_the_batch(tiny_path):
    steps = batches(tiny_path, 1)[0].steps
    parts = shard(steps, 2)
    assert sorted(id(s) for p in parts for s in p) == sorted(id(s) for s in steps)
    assert all(parts)
    games = [{s.game_idx for s in p} for p in parts]
    assert not games[0] & games[1]


def test_two_ranks_end_where_one_learner_on_the_whole_batch_ends(tiny_path, tmp_path):
    data = batches(tiny_path)
    one = learner(tiny_path, 1)
    before = trainable_copy(one)
    single = [one.update(b) for b in data]
    two = learner(tiny_path, 2)
    try:
        assert max_weight_diff(trainable_copy(two), before) == 0.0  # the same start in rank 0
        parallel = [two.update(b) for b in data]
        assert max_weight_diff(trainable_copy(two), before) > 1e-3  # it learned something
        assert max_weight_diff(trainable_copy(two), trainable_copy(one)) < 1e-10
        for a, b in zip(single, parallel):  # the loss and token counts are the whole batch's
            assert b["loss"] == pytest.approx(a["loss"], abs=1e-10)
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-9)
            assert b["train_tokens"] == a["train_tokens"]
        ckpt = two.save_checkpoint(str(tmp_path / "ckpt-3"), "ckpt-3")
        assert ckpt.version == 3 and (tmp_path / "ckpt-3" / "adapter_config.json").is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-3"]
        # resume: rank 0 takes the state of the single learner after one update; the next update
        # of both ranks must equal the single learner's next update from that state
        restart = learner(tiny_path, 1)
        restart.update(data[0])
        state = restart.state_dict()
        two.load_state_dict(state)
        restart.update(data[1])
        two.update(data[1])
        assert max_weight_diff(trainable_copy(two), trainable_copy(restart)) < 1e-10
    finally:
        two.close()
    assert two.workers is None


def test_with_prefix_sharing_the_ranks_agree_to_float32_rounding(tiny_path):
    data = batches(tiny_path, 2)
    one = learner(tiny_path, 1, mini_batch_size=4, prefix_sharing=True)
    single = [one.update(b) for b in data]
    two = learner(tiny_path, 2, mini_batch_size=4, prefix_sharing=True)
    try:
        parallel = [two.update(b) for b in data]
    finally:
        two.close()
    for a, b in zip(single, parallel):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-7)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-7)
        assert b["prefix_share"] > 0.3
    assert max_weight_diff(trainable_copy(two), trainable_copy(one)) < 1e-5


def test_a_worker_that_dies_before_the_rendezvous_is_one_error_not_a_hang(tiny_path, monkeypatch):
    # a learner class in a module only this process has: the spawned worker fails to unpickle it and exits
    module = types.ModuleType("unstable_parent_process_only")
    module.NotImportableLearner = type("NotImportableLearner", (ReinforceLearner,), {"__module__": module.__name__})
    monkeypatch.setitem(sys.modules, module.__name__, module)
    options = ReinforceOptions(device="cpu", lora={"rank": 4, "alpha": 8}, data_parallel=2, data_parallel_timeout_s=600)
    with pytest.raises(UnstableError, match="rank 1 died while starting"):
        module.NotImportableLearner(options, tiny_path, seed=0)
    assert not torch.distributed.is_initialized()


def test_ppo_passes_take_their_steps_on_every_rank(tiny_path):
    """epochs = 3 with a clip: each pass's gradients are summed over the ranks before its step."""
    data = batches(tiny_path, 2)
    ppo = {"epochs": 3, "clip_ratio": 0.1}
    one = learner(tiny_path, 1, **ppo)
    for b in data:
        one.update(b)
    two = learner(tiny_path, 2, **ppo)
    try:
        for b in data:
            two.update(b)
    finally:
        two.close()
    assert max_weight_diff(trainable_copy(two), trainable_copy(one)) < 1e-10
    assert one.optimizer.state[one.params[0]]["step"] == 6
