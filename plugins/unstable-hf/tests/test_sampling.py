"""Every request samples from its own seed: its completion does not depend on its batch, and the
draws follow the softmax of the model's logits (temperature, top-p) as an independent forward
pass computes them."""

import pytest
import torch
from scipy.stats import chisquare

from unstable_core import GenerationRequest, ModelRef
from unstable_hf.inference import HFInference, HFInferenceOptions
from unstable_hf.sampling import PerRequestSampler, nucleus

torch.set_num_threads(1)
PROMPT = "Your card is: 'K'"


def backend(**kw):
    return HFInference(HFInferenceOptions(**{"device": "cpu", "max_tokens": 6, "lora": {"rank": 4, "alpha": 8}, **kw}))


def requests(tiny_path, prompts_and_seeds):
    ref = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
    return [GenerationRequest(model=ref, prompt=p, seed=s) for p, s in prompts_and_seeds]


def test_a_request_draws_the_same_alone_and_in_any_batch(tiny_path):
    b = backend()
    mine = (PROMPT, 11)
    others = [(f"Your card is: '{c}' and round {i}", 100 + i) for i, c in enumerate("JQKJQ")]
    alone = b.generate_batch(requests(tiny_path, [mine]))[0]
    first = b.generate_batch(requests(tiny_path, [mine, *others]))[0]
    last = b.generate_batch(requests(tiny_path, [*reversed(others), mine]))[-1]
    for out in (first, last):
        assert out.completion_token_ids == alone.completion_token_ids
        assert out.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    seeds = {tuple(b.generate_batch(requests(tiny_path, [(PROMPT, s)]))[0].completion_token_ids) for s in range(8)}
    assert len(seeds) > 1  # the seed matters


def first_token_distribution(b, tiny_path, temperature):
    b.prepare(requests(tiny_path, [(PROMPT, 0)])[0].model)
    ids = torch.tensor([b.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]])
    with torch.no_grad(), b._bases[tiny_path].disable_adapter():
        logits = b._bases[tiny_path](input_ids=ids).logits[0, -1].double()
    return torch.softmax(logits / temperature, dim=-1)


# the fast tiny model is near uniform at temperature 1: low temperatures give a distribution
# with a shape (at 0.1 the top token has 0.81) that a wrong sampler could not match
@pytest.mark.parametrize("temperature,top_p", [(0.1, 1.0), (0.2, 0.6)])
def test_draws_follow_the_softmax_of_the_model(tiny_path, temperature, top_p):
    b = backend(max_tokens=1, temperature=temperature, top_p=top_p, max_batch_size=256)
    probs = nucleus(first_token_distribution(b, tiny_path, temperature), top_p)
    probs = probs / probs.sum()
    n = 3000
    counts = torch.zeros_like(probs)
    for start in range(0, n, 250):
        for out in b.generate_batch(requests(tiny_path, [(PROMPT, s) for s in range(start, start + 250)])):
            counts[out.completion_token_ids[0]] += 1
    assert counts[probs == 0].sum() == 0  # nothing outside the nucleus
    expected = probs * n
    common = expected >= 5
    observed = torch.cat([counts[common], counts[~common].sum().unsqueeze(0)])
    wanted = torch.cat([expected[common], expected[~common].sum().unsqueeze(0)])
    keep = wanted > 0
    assert chisquare(observed[keep].numpy(), wanted[keep].numpy()).pvalue > 1e-3


def test_nucleus_keeps_the_smallest_set_reaching_top_p():
    probs = torch.tensor([[0.1, 0.5, 0.15, 0.25], [0.97, 0.01, 0.01, 0.01]], dtype=torch.float64)
    kept = nucleus(probs, 0.7)
    assert kept.tolist() == [[0.0, 0.5, 0.0, 0.25], [0.97, 0.0, 0.0, 0.0]]
    assert nucleus(probs, 1.0) is probs


def test_the_sampler_keeps_each_drawn_tokens_tempered_logprob_before_top_p():
    scores = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.0, 3.0, 1.0, -2.0]])
    sampler = PerRequestSampler([5, 6], temperature=0.7, top_p=0.9)
    masked = [sampler(None, scores) for _ in range(3)]  # three positions
    chosen = torch.stack([m.argmax(dim=-1) for m in masked], dim=1)  # generation picks the one token left
    assert all(((m == 0).sum(dim=-1) == 1).all() for m in masked)
    by_hand = torch.log_softmax(scores / 0.7, dim=-1).gather(-1, chosen)
    assert sampler.logprobs().shape == (2, 3)
    assert sampler.logprobs() == pytest.approx(by_hand, abs=1e-6)
    assert (nucleus(torch.softmax(scores / 0.7, dim=-1), 0.9).gather(-1, chosen) > 0).all()  # drawn inside the nucleus
