"""A data-parallel worker that dies in the middle of an update ends the update within seconds,
naming its rank: rank 0 watches its worker processes while it waits for the gradients' sum,
where the collective would wait for the dead rank until ``data_parallel_timeout_s`` (NCCL) or
fail with a transport error that names no rank (gloo)."""

import os
import signal
import time

import pytest
import torch
from transformers import AutoTokenizer

from unstable_core import UnstableError
from unstable_hf.testing import self_play_batches
from unstable_reinforce.learner import ReinforceLearner
from unstable_reinforce.options import ReinforceOptions


def test_a_worker_killed_mid_update_ends_the_update_naming_its_rank(tiny_path):
    batch = self_play_batches(AutoTokenizer.from_pretrained(tiny_path), 1, 24, seed=5)[0]
    options = ReinforceOptions(device="cpu", lr=5e-3, max_generation_len=16, lora={"rank": 4, "alpha": 8},
                               data_parallel=2, data_parallel_timeout_s=600)
    two = ReinforceLearner(options, tiny_path, seed=3)
    worker = two.workers.procs[0]
    try:
        shard_of_rank_0 = two.update_shard

        def killed_meanwhile(*args, **kwargs):  # rank 1 has its shard; it dies as rank 0 works on its own
            os.kill(worker.pid, signal.SIGKILL)
            return shard_of_rank_0(*args, **kwargs)

        two.update_shard = killed_meanwhile
        start = time.monotonic()
        with pytest.raises(UnstableError, match=r"data-parallel learner rank 1 died while updating \(exit status -9"):
            two.update(batch)
        assert time.monotonic() - start < 30  # not data_parallel_timeout_s
    finally:
        if worker.is_alive():
            worker.kill()
        two.close()
    assert not torch.distributed.is_initialized()
