"""Several adapters in one generate call: every prompt gets what it gets served alone under its
own adapter (float64: equal logprobs), a saved final norm included; the batcher cuts a batch
into calls of at most max_loras adapters, and serves a model that cannot mix per adapter."""

import asyncio

import pytest
import torch

from unstable_core import GenerationRequest, ModelRef
from unstable_hf.inference import HFInference, HFInferenceOptions
from unstable_hf.mixed_adapters import chunks, unsupported
from unstable_hf.shared_prefill import plan
from unstable_hf.testing import random_lora_adapter, self_play_steps

torch.set_num_threads(1)


def backend(**kw):
    options = {"device": "cpu", "dtype": "float64", "max_tokens": 6, "lora": {"rank": 4, "alpha": 8, "modules_to_save": ["model.norm"]}, **kw}
    return HFInference(HFInferenceOptions(**options))


@pytest.fixture(scope="module")
def refs(tiny_path, tmp_path_factory):
    """Three checkpoints (their own LoRA weights and final norm gains: 0.5, 2, 3) and the base model."""
    root = tmp_path_factory.mktemp("adapters")
    out = [ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)]
    for i, gain in enumerate((0.5, 2.0, 3.0)):
        path = random_lora_adapter(tiny_path, root / f"a{i}", seed=10 + i, modules_to_save=["model.norm"], norm_scale=gain)
        out.append(ModelRef(uid=f"ckpt-{i}", kind="checkpoint", backend="hf", model=tiny_path, adapter_path=path, version=i + 1))
    return out


@pytest.fixture(scope="module")
def prompts(tiny_path):
    from transformers import AutoTokenizer

    return [s.turn.prompt for s in self_play_steps(AutoTokenizer.from_pretrained(tiny_path), n=16)]


@pytest.mark.parametrize("share", [False, True])
def test_a_mixed_batch_gives_each_prompt_what_its_own_adapter_gives_it_alone(refs, prompts, share):
    requests = [GenerationRequest(model=refs[i % 4], prompt=p, seed=i) for i, p in enumerate(prompts)]
    b = backend(share_prompt_prefixes=share)
    mixed = b.generate_batch(requests)
    assert b.batches == [len(requests)]  # one call
    alone = backend(share_prompt_prefixes=share, mixed_adapters=False)  # peft's own adapter, one at a time
    for request, out in zip(requests, mixed):
        single = alone.generate_batch([request])[0]
        assert out.completion_token_ids == single.completion_token_ids
        assert out.logprobs == pytest.approx(single.logprobs, rel=0, abs=1e-10)
    # the adapters made a difference: the same prompt under each gives four first-token logprobs
    firsts = [alone.generate_batch([GenerationRequest(model=r, prompt=prompts[0], seed=0)])[0].logprobs[0] for r in refs]
    assert len({round(x, 6) for x in firsts}) == 4


def test_shared_prefixes_stay_within_an_adapter():
    stem = list(range(1, 9))
    prompts = [stem + [10], stem + [11], stem + [12], stem + [13]]
    assert plan(prompts).prefixes == [stem]
    split = plan(prompts, groups=[0, 1, 0, 1])
    assert split.prefixes == [stem, stem] and split.groups == [0, 1]
    assert split.row == [0, 1, 0, 1]


def test_calls_hold_at_most_max_loras_adapters():
    items = ["a", None, "b", "a", "c", None, "c", "d", "a"]
    assert chunks(items, lambda x: x, 2) == [[None, None, "a", "a", "a", "b"], ["c", "c", "d"]]
    assert chunks(items, lambda x: x, 4) == [[None, None, "a", "a", "a", "b", "c", "c", "d"]]
    assert chunks([None, None], lambda x: x, 1) == [[None, None]]


def test_the_batcher_serves_many_adapters_in_calls_of_max_loras(refs, prompts):
    b = backend(max_loras=2, batch_wait_ms=200)
    b.prepare(refs[0])
    requests = [GenerationRequest(model=refs[i % 4], prompt=p, seed=i) for i, p in enumerate(prompts[:12])]

    async def all_at_once():
        return await asyncio.gather(*(b.generate(r) for r in requests))

    outs = asyncio.run(all_at_once())
    assert sum(b.batches) == 12 and len(b.batches) == 2  # base + 2 adapters, then the third
    assert len(b._adapters) <= 2
    alone = backend()
    for request, out in zip(requests, outs):
        assert out.logprobs == pytest.approx(alone.generate_batch([request])[0].logprobs, rel=0, abs=1e-10)


def test_a_model_that_cannot_mix_is_served_one_call_per_adapter(caplog, monkeypatch, refs, prompts):
    b = backend(batch_wait_ms=200)
    b.prepare(refs[0])
    assert unsupported(b._bases[refs[0].model]) is None  # the tiny model's saved RMSNorm mixes
    monkeypatch.setattr("unstable_hf.inference.unsupported_mix", lambda model: "a saved BatchNorm1d")
    requests = [GenerationRequest(model=refs[i % 4], prompt=p, seed=i) for i, p in enumerate(prompts[:8])]

    async def all_at_once():
        return await asyncio.gather(*(b.generate(r) for r in requests))

    with caplog.at_level("WARNING", logger="unstable.hf"):
        asyncio.run(all_at_once())
    assert "hf inference: one generate call per adapter (a saved BatchNorm1d)" in [r.getMessage() for r in caplog.records]
    assert len(b.batches) >= 4 and max(b.batches) <= 2  # each adapter (and the base) apart


def test_a_layer_called_with_its_input_by_name_is_mixed_as_by_position(refs):
    """The hooks read a layer's input whether the model passes it by position or by name."""
    from peft.tuners.lora import Linear
    from peft.utils.other import ModulesToSaveWrapper

    from unstable_hf.mixed_adapters import BASE, mixed

    b = backend()
    b.generate_batch([GenerationRequest(model=r, prompt="Your card: K", seed=0) for r in refs])  # every adapter resident
    model = b._base(refs[0])
    layer = next(m for m in model.modules() if isinstance(m, Linear))
    norm = next(m for m in model.modules() if isinstance(m, ModulesToSaveWrapper))
    h = torch.randn(4, 3, layer.in_features, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    g = torch.randn(4, 3, norm.original_module.weight.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        with model.disable_adapter():
            base = layer(h)
        with mixed(model, [BASE, "ckpt-0", "ckpt-1", "ckpt-2"]):
            by_position, by_name = layer(h), layer(x=h)
            norm_by_position, norm_by_name = norm(g), norm(hidden_states=g)
    assert torch.equal(by_position, by_name) and torch.equal(norm_by_position, norm_by_name)
    assert torch.equal(by_position[0], base[0]) and not any(torch.allclose(by_position[i], base[i]) for i in (1, 2, 3))


def test_scoring_through_the_hooks_equals_peft_s_own_adapter(refs, prompts):
    hooked, alone = backend(), backend(mixed_adapters=False)
    hooked.generate_batch([GenerationRequest(model=r, prompt=prompts[1], seed=i) for i, r in enumerate(refs)])  # adapters off
    answers = ["", "K", "[bet]", "\\boxed{[bet]}"]  # the random tiny model ends at once most often (p ~ 0.002)
    found = []
    for ref in refs:
        request = GenerationRequest(model=ref, prompt=prompts[1])
        expected = alone.completion_probabilities(request, answers)
        assert hooked.completion_probabilities(request, answers) == pytest.approx(expected, rel=1e-9, abs=0)
        found.append(expected)
    assert all(p > 0 for f in found for p in f)  # float64: even the boxed answer's ~1e-17
    assert len({round(f[0], 12) for f in found}) == len(refs)  # and the adapters score it differently


def test_serving_never_switches_peft_s_adapters(refs, prompts, monkeypatch):
    """peft's set_adapter and disable_adapter walk every resident adapter (tens of ms a call with
    dozens resident): once the model is loaded, no call of a model that mixes adapters uses them."""
    from peft import PeftModel
    from peft.tuners.tuners_utils import BaseTuner

    b = backend(max_loras=2)
    b.generate_batch([GenerationRequest(model=refs[1], prompt=prompts[0], seed=0)])

    def refused(*args, **kwargs):
        raise AssertionError("peft's adapters switched")

    for owner, name in ((PeftModel, "set_adapter"), (PeftModel, "disable_adapter"), (BaseTuner, "enable_adapter_layers"),
                        (BaseTuner, "disable_adapter_layers")):  # (loading an adapter still sets peft's own)
        monkeypatch.setattr(owner, name, refused)
    served = [b.generate_batch([GenerationRequest(model=r, prompt=prompts[i], seed=i)])[0] for i, r in enumerate(refs)]  # one each
    served.append(b.generate_batch([GenerationRequest(model=r, prompt=prompts[4], seed=4) for r in refs[2:]])[0])  # two, ckpt-0 evicted
    b.completion_probabilities(GenerationRequest(model=refs[3], prompt=prompts[5]), ["\\boxed{[bet]}"])
    assert all(out.completion_token_ids for out in served) and list(b._adapters) == ["ckpt-1", "ckpt-2"]


def test_an_adapter_that_saves_a_module_the_first_did_not_is_served_with_it(refs, prompts):
    """The layers the hooks go on are looked up again when the resident adapters change: here the
    backend's own LoRA saves no module, the checkpoints' save the final norm (gains 0.5, 2, 3)."""
    lora = {"rank": 4, "alpha": 8}
    hooked, alone = backend(lora=lora), backend(lora=lora, mixed_adapters=False)
    request = GenerationRequest(model=refs[0], prompt=prompts[0], seed=0)
    assert hooked.generate_batch([request])[0].logprobs == pytest.approx(alone.generate_batch([request])[0].logprobs, abs=1e-10)
    for ref in refs[1:]:
        request = GenerationRequest(model=ref, prompt=prompts[0], seed=0)
        assert hooked.generate_batch([request])[0].logprobs == pytest.approx(alone.generate_batch([request])[0].logprobs, abs=1e-10)
