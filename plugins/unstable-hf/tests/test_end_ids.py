"""Generation stops at every end-of-sequence id a model folder declares: the tokenizer's ``eos``
and each ``eos_token_id`` of its ``generation_config.json``. A Gemma-2-it folder ends its turns
with ``<end_of_turn>`` while its tokenizer's eos is ``<eos>``; Qwen2.5-Instruct's lists
``<|im_end|>`` and ``<|endoftext|>``. The completion is cut at the first of them, its text
leaves it out, and the exact scorer counts each way a text can end."""

import math

import pytest
import torch

from unstable_core import GenerationRequest, ModelRef
from unstable_hf.inference import HFInference, HFInferenceOptions

torch.set_num_threads(1)

PROMPTS = ["<start_of_turn>user\nYour card is: 'K'.<end_of_turn>\n<start_of_turn>model\n", "Available moves: '[check]', '[bet]'"]
#: per shape: the end id generation must also stop at (not the tokenizer's eos)
OTHER_END = {"gemma2": "<end_of_turn>", "qwen2.5": "<|endoftext|>"}


def biased(backend, path, token_id, bias):
    """Add ``bias`` to ``token_id``'s logit (before Gemma's softcap) in every forward of the served model."""
    head = backend._bases[path].get_base_model().get_output_embeddings()

    def hook(_module, _inputs, output):
        output = output.clone()
        output[..., token_id] += bias
        return output

    return head.register_forward_hook(hook)


@pytest.mark.parametrize("shape", ["gemma2", "qwen2.5"])
def test_generation_stops_at_the_folders_other_end_id(shaped_folder, shape):
    path = shaped_folder(shape)
    b = HFInference(HFInferenceOptions(device="cpu", max_tokens=8, lora={"rank": 4, "alpha": 8}))
    ref = ModelRef(uid="base", kind="base", backend="hf", model=path)
    b.prepare(ref)
    end = b.tokenizer.convert_tokens_to_ids(OTHER_END[shape])
    assert end != b.tokenizer.eos_token_id
    # the other end made likely enough that most completions meet it within a few tokens
    handle = biased(b, path, end, 30.0)
    try:
        outs = b.generate_batch([GenerationRequest(model=ref, prompt=p, seed=s) for s in range(6) for p in PROMPTS])
    finally:
        handle.remove()
    ended = [o for o in outs if end in o.completion_token_ids]
    assert len(ended) >= len(outs) // 2, [o.completion_token_ids for o in outs]
    for o in ended:  # cut at it: its last token, the completion not truncated, its text without it
        assert o.completion_token_ids.index(end) == len(o.completion_token_ids) - 1, o.completion_token_ids
        assert not o.truncated and len(o.logprobs) == len(o.completion_token_ids)
        assert OTHER_END[shape] not in o.text and o.text == b.tokenizer.decode(o.completion_token_ids[:-1], skip_special_tokens=True)


def test_the_stop_ids_generate_is_given_are_the_tokenizers_and_the_folders(shaped_folder, monkeypatch):
    path = shaped_folder("gemma2")
    b = HFInference(HFInferenceOptions(device="cpu", max_tokens=2, lora={"rank": 4, "alpha": 8}))
    ref = ModelRef(uid="base", kind="base", backend="hf", model=path)
    b.prepare(ref)
    model = b._bases[path]
    given = []
    original = model.generate

    def spy(*args, **kwargs):
        given.append(kwargs["generation_config"].eos_token_id)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    b.generate_batch([GenerationRequest(model=ref, prompt=PROMPTS[0], seed=0)])
    ids = b.tokenizer.convert_tokens_to_ids(["<eos>", "<end_of_turn>"])
    assert given == [ids]
    assert list(model.generation_config.eos_token_id) == ids


def test_the_scorer_counts_every_end_a_text_can_have(shaped_folder):
    """completion_probabilities(text) = P(text's tokens) x (P(<eos>) + P(<end_of_turn>)) after them,
    computed here from the model's full logits."""
    path = shaped_folder("gemma2")
    b = HFInference(HFInferenceOptions(device="cpu", max_tokens=8, lora={"rank": 4, "alpha": 8}))
    ref = ModelRef(uid="base", kind="base", backend="hf", model=path)
    b.prepare(ref)
    tok = b.tokenizer
    prompt = tok(PROMPTS[0], add_special_tokens=False)["input_ids"]
    texts = ["\\boxed{[bet]}", "ok"]
    ends = tok.convert_tokens_to_ids(["<eos>", "<end_of_turn>"])
    model = b._bases[path]
    handles = [biased(b, path, e, 12.0) for e in ends]  # either end likely enough to count
    try:
        found = b.completion_probabilities(GenerationRequest(model=ref, prompt=PROMPTS[0]), texts)
        for text, p in zip(texts, found, strict=True):
            ids = tok(text, add_special_tokens=False)["input_ids"]
            with torch.no_grad(), model.disable_adapter():
                logits = model(input_ids=torch.tensor([prompt + ids])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            body = sum(float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(ids))
            tail = [math.exp(float(logp[-1, e])) for e in ends]
            assert min(tail) > 1e-3 * max(tail)  # both ends count
            assert math.log(p) == pytest.approx(body + math.log(sum(tail)), abs=1e-9)
    finally:
        for handle in handles:
            handle.remove()
