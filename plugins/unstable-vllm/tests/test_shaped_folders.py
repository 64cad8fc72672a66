"""Sampling = scoring on model folders shaped like real checkpoints (``unstable models
init-shaped``): a Qwen2.5-Instruct-shaped folder whose generation_config.json carries its own
temperature, top_p, top_k and repetition penalty, and a Gemma-2-shaped one with logit softcapping.
The engine samples at the run's options only, and every reported logprob equals transformers' at
the same temperature; under top_p < 1 it equals that logprob renormalised over the nucleus (vLLM's
processed logprobs, the difference docs/logprobs.md declares)."""

import asyncio
import math

import pytest

from unstable_core import GenerationRequest, ModelRef
from unstable_vllm.options import VLLMInferenceOptions
from unstable_vllm.testing import HFReference, max_abs_diff

pytestmark = pytest.mark.vllm

PROMPTS = ["<|im_start|>user\nYour card: J. Available actions: [check], [bet]<|im_end|>\n<|im_start|>assistant\n",
           "Kuhn Poker round 3. Your card: Q. Player 0 bets.", "Please reason step by step."]
MAX_TOKENS = 8


def engine(folder):
    from unstable_vllm.inference import VLLMInference

    options = VLLMInferenceOptions(dtype="float32", temperature=1.0, max_tokens=MAX_TOKENS, max_loras=1, max_cpu_loras=1,
                                   max_model_len=256, max_num_seqs=16, enforce_eager=True, kv_cache_gib=1)
    backend = VLLMInference(options)
    backend.prepare(ModelRef(uid="base", kind="base", backend="vllm", model=folder))
    return backend


def serve(backend, folder, seeds, **options):
    ref = ModelRef(uid="base", kind="base", backend="vllm", model=folder, options=options)

    async def go():
        return await asyncio.gather(*[backend.generate(GenerationRequest(model=ref, prompt=PROMPTS[s % len(PROMPTS)], seed=s))
                                      for s in seeds])
    return asyncio.run(go())


def nucleus_log_mass(hf, prompt_ids, completion_ids, temperature, top_p):
    """log of the nucleus' total probability at each completion position (the top-p set as vLLM
    keeps it: the most likely tokens up to cumulative probability top_p, the one crossing it
    included)."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = hf.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    probs = torch.softmax(logits / temperature, dim=-1).sort(dim=-1, descending=True).values
    before = probs.cumsum(dim=-1) - probs
    return [math.log(float(row[b < top_p].sum())) for row, b in zip(probs, before)]


@pytest.fixture(scope="module")
def qwen(shaped_folder):
    folder = str(shaped_folder("qwen2.5", hidden=64, head_dim=32))  # vLLM's CPU attention: head_dim (hidden / heads) 32 and up
    backend = engine(folder)
    yield folder, backend
    backend.close()


def test_a_qwen_shaped_folder_samples_at_the_runs_temperature_not_its_generation_config(qwen):
    folder, backend = qwen
    hf = HFReference(folder)
    worst = 0.0
    for out in serve(backend, folder, range(6), temperature=0.7):
        assert 1 <= len(out.completion_token_ids) == len(out.logprobs) <= MAX_TOKENS
        worst = max(worst, max_abs_diff(out.logprobs, hf.logprobs(out.prompt_token_ids, out.completion_token_ids, temperature=0.7)))
    assert worst <= 1e-4


def test_under_top_p_the_reported_logprob_is_renormalised_over_the_nucleus(qwen):
    folder, backend = qwen
    hf = HFReference(folder)
    worst = 0.0
    for out in serve(backend, folder, range(6), temperature=1.0, top_p=0.9):
        full = hf.logprobs(out.prompt_token_ids, out.completion_token_ids)
        mass = nucleus_log_mass(hf, out.prompt_token_ids, out.completion_token_ids, 1.0, 0.9)
        worst = max(worst, max_abs_diff(out.logprobs, [f - m for f, m in zip(full, mass)]))
    # vLLM sums the 151,936 sorted probabilities in float32 from the other end, so a token within
    # rounding of the nucleus' edge may fall on the other side of it (measured: 4.4e-4 at most)
    assert worst <= 1e-3


def test_a_gemma2_shaped_folder_is_softcapped_as_transformers_does(shaped_folder):
    folder = str(shaped_folder("gemma2", head_dim=32))
    backend = engine(folder)
    try:
        hf = HFReference(folder)
        outs = serve(backend, folder, range(6))
        worst = max(max_abs_diff(o.logprobs, hf.logprobs(o.prompt_token_ids, o.completion_token_ids)) for o in outs)
    finally:
        backend.close()
    assert worst <= 1e-4
