"""token_logprobs against the naive computation (float32) and a float64 reference."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from unstable_hf.logprobs import (
    auto_chunk_size,
    chunked_autograd_logprobs,
    naive_token_logprobs,
    token_entropy,
    token_logprobs,
)

torch.set_num_threads(1)


def make(seed, b, t, h, v, dtype=torch.float32, density=0.6):
    g = torch.Generator().manual_seed(seed)
    hidden_bt = torch.randn(b, t, h, generator=g, dtype=torch.float64)
    weight = (torch.randn(v, h, generator=g, dtype=torch.float64) / h**0.5)
    mask = torch.rand(b, t, generator=g) < density  # ragged: a different number of positions per row
    mask[0, 0] = True
    targets = torch.randint(v, (b, t), generator=g)
    return hidden_bt.to(dtype), weight.to(dtype), mask, targets


def grads(fn, hidden, weight, targets, coef, train_weight=True, **kw):
    hidden = hidden.detach().clone().requires_grad_(True)
    weight = weight.detach().clone().requires_grad_(train_weight)
    out = fn(hidden, weight, targets, **kw)
    (out * coef).sum().backward()
    return out.detach(), hidden.grad, weight.grad


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000), b=st.integers(1, 4), t=st.integers(1, 24), h=st.sampled_from([8, 16, 32]),
    v=st.integers(2, 300), chunk=st.integers(1, 40), temperature=st.sampled_from([1.0, 0.7, 1.5]),
    softcap=st.sampled_from([None, 5.0, 30.0]), recompute=st.booleans(), train_weight=st.booleans(),
)
def test_matches_naive_float32_and_float64_reference(seed, b, t, h, v, chunk, temperature, softcap, recompute, train_weight):
    hidden_bt, weight, mask, targets_bt = make(seed, b, t, h, v)
    hidden, targets = hidden_bt[mask], targets_bt[mask]  # flattened ragged positions
    coef = torch.randn(hidden.shape[0], generator=torch.Generator().manual_seed(seed + 1))
    kw = dict(temperature=temperature, softcap=softcap)
    ours = grads(lambda x, w, y, **k: token_logprobs(x, w, y, chunk_size=chunk, recompute=recompute, **k), hidden, weight, targets, coef,
                 train_weight=train_weight, **kw)
    naive = grads(naive_token_logprobs, hidden, weight, targets, coef, train_weight=train_weight, **kw)
    ref = grads(naive_token_logprobs, hidden.double(), weight.double(), targets, coef.double(), train_weight=train_weight, **kw)
    for a, b_, r in zip(ours, naive, ref):
        if a is None:  # frozen lm_head: no weight gradient from anyone
            assert b_ is None and r is None and not train_weight
            continue
        assert torch.allclose(a, b_, atol=1e-5, rtol=1e-5)
        assert torch.allclose(a.double(), r.double(), atol=1e-5, rtol=1e-4)


def test_reference_is_float64():
    hidden, weight, mask, targets = make(0, 2, 5, 8, 50, dtype=torch.float64)
    out = naive_token_logprobs(hidden[mask], weight, targets[mask])
    assert out.dtype == torch.float64  # upcast to at least float32: float64 stays float64
    assert token_logprobs(hidden[mask], weight, targets[mask], chunk_size=2).dtype == torch.float64
    assert token_logprobs(hidden[mask].float(), weight.float(), targets[mask]).dtype == torch.float32
    ref = torch.log_softmax(hidden[mask] @ weight.t(), -1).gather(1, targets[mask][:, None]).squeeze(1)
    assert torch.allclose(out.double(), ref, atol=1e-6)


def test_frozen_weight_gets_no_grad_and_bf16_hidden_works():
    hidden, weight, mask, targets = make(1, 2, 8, 16, 64)
    h = hidden[mask].bfloat16().requires_grad_(True)
    w = weight.bfloat16()  # frozen lm_head (LoRA training)
    out = token_logprobs(h, w, targets[mask], chunk_size=3)
    assert out.dtype == torch.float32
    out.sum().backward()
    assert h.grad is not None and h.grad.dtype == torch.bfloat16 and w.grad is None


def test_no_jacobian_kept_without_grad():
    hidden, weight, mask, targets = make(4, 2, 6, 8, 30)
    with torch.no_grad():
        out = token_logprobs(hidden[mask].requires_grad_(True), weight, targets[mask], chunk_size=4)
    assert out.grad_fn is None
    assert torch.allclose(out, naive_token_logprobs(hidden[mask], weight, targets[mask]), atol=1e-6)


def test_chunked_autograd_baseline_agrees():
    hidden, weight, mask, targets = make(2, 3, 10, 16, 40)
    a = chunked_autograd_logprobs(hidden[mask], weight, targets[mask], chunk_size=4)
    assert torch.allclose(a, naive_token_logprobs(hidden[mask], weight, targets[mask]), atol=1e-6)


def test_entropy_matches_direct():
    hidden, weight, mask, _ = make(3, 2, 6, 8, 30)
    z = (hidden[mask] @ weight.t()).float() / 0.8
    p = torch.softmax(z, -1)
    expected = -(p * p.log()).sum(-1)
    assert torch.allclose(token_entropy(hidden[mask], weight, chunk_size=2, temperature=0.8), expected, atol=1e-5)


def test_auto_chunk_and_errors():
    assert auto_chunk_size(151_936, budget_bytes=256 * 2**20) == 256 * 2**20 // (151_936 * 12)
    assert auto_chunk_size(10) >= 1
    with pytest.raises(ValueError):
        token_logprobs(torch.zeros(3, 4), torch.zeros(5, 4), torch.zeros(2, dtype=torch.long))
    empty = token_logprobs(torch.zeros(0, 4, requires_grad=True), torch.zeros(5, 4), torch.zeros(0, dtype=torch.long))
    assert empty.shape == (0,)
