"""A request that offers ``choices`` (``collection.answers = "choice"``) is answered with one of
them, drawn with the model's probabilities renormalised over them: the frequencies over seeds
match ``completion_probabilities``, the draw does not depend on the batch (free requests beside it
included), and the completion carries every choice's tokens and probability."""

import math

import pytest
import torch

from unstable_core import GenerationRequest, ModelRef
from unstable_hf.inference import HFInference, HFInferenceOptions

torch.set_num_threads(1)
PROMPT = "Your card is: 'K'. Answer \\boxed{[bet]} or \\boxed{[pass]}."
CHOICES = ["\\boxed{[bet]}", "\\boxed{[pass]}", "\\boxed{[fold]}"]


def backend(**kw):
    return HFInference(HFInferenceOptions(**{"device": "cpu", "max_tokens": 12, "lora": {"rank": 4, "alpha": 8}, **kw}))


def request(tiny_path, seed, choices=CHOICES, prompt=PROMPT):
    ref = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
    return GenerationRequest(model=ref, prompt=prompt, seed=seed, choices=choices)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_choices_are_drawn_with_the_renormalised_probabilities(tiny_path, temperature):
    b = backend(temperature=temperature, top_p=1.0)
    raw = b.completion_probabilities(request(tiny_path, 0), CHOICES)
    want = [p / sum(raw) for p in raw]
    outs = b.generate_batch([request(tiny_path, s) for s in range(600)])
    for out in outs[:5]:
        assert out.choice_probabilities == pytest.approx(want, rel=1e-6)
        assert out.choice_token_ids[CHOICES.index(out.text)] == out.completion_token_ids
        assert out.completion_token_ids[-1] == b.tokenizer.eos_token_id and not out.truncated
        # the tempered logprobs generate reports: their sum is the text's log probability
        assert sum(out.logprobs) == pytest.approx(math.log(raw[CHOICES.index(out.text)]), abs=1e-6)
    n = len(outs)
    for text, p in zip(CHOICES, want, strict=True):
        seen = sum(o.text == text for o in outs) / n
        assert abs(seen - p) < 4 * math.sqrt(max(p * (1 - p), 1e-4) / n), (text, seen, p)


def test_a_choice_draw_is_the_same_alone_and_beside_free_requests(tiny_path):
    b = backend()
    mine = request(tiny_path, 7)
    alone = b.generate_batch([mine])[0]
    others = [request(tiny_path, 100 + i, choices=None, prompt=f"Round {i}") for i in range(3)]
    others += [request(tiny_path, 200 + i, choices=CHOICES[:2], prompt=f"Round {i}: bet or pass?") for i in range(2)]
    mixed = b.generate_batch([others[0], mine, *others[1:]])
    assert mixed[1].text == alone.text and mixed[1].completion_token_ids == alone.completion_token_ids
    assert [o.choice_token_ids == [] for o in mixed] == [True, False, True, True, False, False]
    assert all(o.text in CHOICES[:2] for o in mixed[4:])
    assert len({b.generate_batch([request(tiny_path, s)])[0].text for s in range(40)}) > 1  # the seed matters


def test_choices_outside_the_nucleus_are_drawn_alike(tiny_path):
    """A nucleus that leaves every choice out gives each probability 0: the answer is still one
    of them, each alike."""
    b = backend(top_p=0.01)
    assert b.completion_probabilities(request(tiny_path, 0), CHOICES) == [0.0, 0.0, 0.0]
    outs = b.generate_batch([request(tiny_path, s) for s in range(30)])
    assert {o.text for o in outs} == set(CHOICES) and outs[0].choice_probabilities == pytest.approx([1 / 3] * 3)
