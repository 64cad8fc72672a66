"""Shared prompt prefixes in generation: which prefixes are prefilled once, and that generating
from them gives every prompt what it gets alone (float64: equal logprobs)."""

import random
from types import SimpleNamespace

import pytest
import torch

from unstable_core import Checkpoint, GenerationRequest, ModelRef
from unstable_hf.inference import HFInference, HFInferenceOptions
from unstable_hf.shared_prefill import plan, unsupported
from unstable_hf.testing import random_lora_adapter, self_play_steps

torch.set_num_threads(1)

STEM_A, STEM_B = list(range(1, 9)), list(range(20, 29))


def test_each_run_of_prompts_sharing_a_stem_gets_that_stem_prefilled_once():
    prompts = [STEM_A + [10], STEM_B + [30], STEM_A + [11, 12], STEM_B + [31], STEM_A + [9]]
    found = plan(prompts)
    assert found.prefixes == [STEM_A, STEM_B]
    assert found.row == [0, 1, 0, 1, 0]
    assert found.cached == [8, 9, 8, 9, 8]
    # computed: 2 prefix rows of 9 + 5 rests of at most 2, against 5 x 10 left-padded


def test_a_prefix_stops_one_token_short_of_the_shortest_prompt_of_its_run():
    prompts = [STEM_A, STEM_A + [9, 10], STEM_A + [9, 11]]  # the first is a prefix of the others
    found = plan(prompts)
    assert found.cached == [7, 7, 7] and found.prefixes == [STEM_A[:7]]


@pytest.mark.parametrize("prompts", [[[1, 2, 3], [4, 5, 6], [7, 8]], [[1, 2, 3, 4]], [[5], [5]]])
def test_nothing_is_cached_when_a_left_padded_batch_computes_no_more(prompts):
    assert plan(prompts) is None


def test_a_plan_never_computes_more_than_a_padded_batch_and_every_prefix_is_the_prompts_own():
    rng = random.Random(0)
    for trial in range(300):
        stems = [[rng.randrange(50) for _ in range(rng.randrange(0, 30))] for _ in range(rng.randrange(1, 4))]
        prompts = [rng.choice(stems) + [rng.randrange(50) for _ in range(rng.randrange(1, 15))] for _ in range(rng.randrange(1, 20))]
        found = plan(prompts)
        if found is None:
            continue
        rest = max(len(p) - c for p, c in zip(prompts, found.cached))
        assert len(found.prefixes) * found.prefix_width + len(prompts) * rest < len(prompts) * max(map(len, prompts))
        for p, row, c in zip(prompts, found.row, found.cached):
            assert 0 <= c < len(p)
            assert found.prefixes[row][:c] == p[:c], trial


def backend(share, **kw):
    options = {"device": "cpu", "dtype": "float64", "max_tokens": 6, "lora": {"rank": 4, "alpha": 8}, "share_prompt_prefixes": share, **kw}
    return HFInference(HFInferenceOptions(**options))


@pytest.fixture(scope="module")
def batch(tiny_path):
    """Prompts of scripted self-play (both seats, every turn), a duplicate, a prompt that is the
    beginning of another, and two that share nothing with the rest."""
    from transformers import AutoTokenizer

    prompts = [s.turn.prompt for s in self_play_steps(AutoTokenizer.from_pretrained(tiny_path), n=24)]
    return prompts + [prompts[3], prompts[5][: len(prompts[5]) // 2], "hello", "Your card is: 'K'"]


@pytest.mark.parametrize("adapter", [False, True])
def test_shared_prefixes_generate_what_a_left_padded_batch_generates(tiny_path, tmp_path, batch, adapter):
    ref = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
    if adapter:
        path = random_lora_adapter(tiny_path, tmp_path / "adapter", seed=1)
        ref = ModelRef(uid="ckpt-1", kind="checkpoint", backend="hf", model=tiny_path, adapter_path=path, version=1)
    requests = [GenerationRequest(model=ref, prompt=p, seed=i) for i, p in enumerate(batch)]
    outs = {}
    padded = 0
    for share in (False, True):
        b = backend(share)
        outs[share] = b.generate_batch(requests)
        assert b.prompt_tokens == sum(len(o.prompt_token_ids) for o in outs[share])
        if share:
            assert b.prefill_tokens < 0.6 * padded  # what sharing saves on this batch
        else:
            padded = b.prefill_tokens
            assert padded == len(batch) * max(len(o.prompt_token_ids) for o in outs[share])
    for plain, shared in zip(outs[False], outs[True]):
        assert shared.prompt_token_ids == plain.prompt_token_ids
        assert shared.completion_token_ids == plain.completion_token_ids
        assert shared.logprobs == pytest.approx(plain.logprobs, rel=0, abs=1e-10)
    # and each equals the prompt generated alone
    alone = backend(True).generate_batch(requests[:1] + requests[-1:])
    assert alone[0].logprobs + alone[1].logprobs == pytest.approx(outs[True][0].logprobs + outs[True][-1].logprobs, abs=1e-10)


def test_a_checkpoint_loaded_while_serving_gets_its_own_prefixes(tiny_path, tmp_path, batch):
    """The cached prefixes are computed under the adapter being served, never taken from another:
    the same prompts under the base model and under an adapter give different logprobs."""
    b = backend(True)
    base = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
    path = random_lora_adapter(tiny_path, tmp_path / "a", seed=2)
    b.load_checkpoint(Checkpoint(uid="ckpt-2", version=2, path=path))
    ckpt = ModelRef(uid="ckpt-2", kind="checkpoint", backend="hf", model=tiny_path, adapter_path=path, version=2)
    first = b.generate_batch([GenerationRequest(model=base, prompt=p, seed=0) for p in batch[:8]])
    second = b.generate_batch([GenerationRequest(model=ckpt, prompt=p, seed=0) for p in batch[:8]])
    plain = backend(False).generate_batch([GenerationRequest(model=ckpt, prompt=p, seed=0) for p in batch[:8]])
    assert sum((o.logprobs for o in second), []) == pytest.approx(sum((o.logprobs for o in plain), []), abs=1e-10)
    assert [o.logprobs[0] for o in first] != pytest.approx([o.logprobs[0] for o in second], abs=1e-3)


def test_a_sliding_window_model_is_served_without_shared_prefixes(caplog, monkeypatch, tiny_path, batch):
    full = SimpleNamespace(config=SimpleNamespace(layer_types=["full_attention"] * 2, sliding_window=None))
    window = SimpleNamespace(config=SimpleNamespace(layer_types=["sliding_attention", "full_attention"], sliding_window=64))
    old_style = SimpleNamespace(config=SimpleNamespace(sliding_window=4096, use_sliding_window=True))
    assert unsupported(full) is None
    assert "sliding_attention" in unsupported(window)
    assert "sliding-window" in unsupported(old_style)
    b = backend(True)
    ref = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
    b.prepare(ref)
    assert unsupported(b._bases[tiny_path]) is None  # the tiny Qwen3 takes them
    monkeypatch.setattr("unstable_hf.shared_prefill.unsupported", lambda model: "a sliding window")
    requests = [GenerationRequest(model=ref, prompt=p, seed=0) for p in batch[:6]]
    with caplog.at_level("WARNING", logger="unstable.hf"):
        b.generate_batch(requests)
        b.generate_batch(requests)
    assert [r.getMessage() for r in caplog.records if "prefixes off" in r.getMessage()] == [
        "hf inference: shared prompt prefixes off (a sliding window); every prompt is prefilled whole"]
    assert b.prefill_tokens == 2 * 6 * max(len(b.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in batch[:6])
