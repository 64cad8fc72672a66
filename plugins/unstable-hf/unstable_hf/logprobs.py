"""Memory-bounded per-token logprobs (Unsloth / verl / Liger style).

At long context the full-vocabulary logits dominate a learner's memory: tokens x vocab floats.
``token_logprobs`` computes ``log softmax(h W^T / T)[target]`` over flattened positions (pass
only the positions that predict completion tokens) in chunks, with the logits upcast to float32
inside a chunk. Its backward **recomputes** each chunk's logits instead of keeping them, so what
autograd holds is the hidden states, the targets and one float per token (the log-sum-exp), never
the logits. Chunking under plain autograd would keep every chunk's logits and save nothing.

Gradients flow to the hidden states and, when it requires grad, to the lm_head weight.
Optional: temperature, a logit softcap ``c * tanh(z / c)`` (Gemma 2), per-token entropy (no grad).
"""

from __future__ import annotations

from typing import Any

import torch

DEFAULT_BUDGET_BYTES = 256 * 2**20


def auto_chunk_size(vocab: int, device: torch.device | str = "cpu", budget_bytes: int | None = None) -> int:
    """Tokens per chunk so that a chunk's float32 logits and their softmax (about 3 vocab-sized
    float32 rows per token) fit in `budget_bytes`: by default an eighth of free memory, at most
    256 MiB."""
    if budget_bytes is None:
        budget_bytes = DEFAULT_BUDGET_BYTES
        dev = torch.device(device)
        try:
            if dev.type == "cuda":
                free, _total = torch.cuda.mem_get_info(dev)
            else:
                import os

                free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            budget_bytes = min(budget_bytes, max(free // 8, 16 * 2**20))
        except (ValueError, OSError, RuntimeError, AttributeError):
            pass
    return max(1, int(budget_bytes // (vocab * 4 * 3)))


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, temperature: float, softcap: float | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(scaled logits upcast to at least float32, tanh term for the softcap's derivative or None)."""
    z = h @ weight.t()
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    t = None
    if softcap is not None:
        t = torch.tanh(z / softcap)
        z = softcap * t
    if temperature != 1.0:
        z = z / temperature
    return z, t


class _ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int,
                temperature: float, softcap: float | None, recompute: bool) -> torch.Tensor:
        n = hidden.shape[0]
        acc = torch.promote_types(torch.promote_types(hidden.dtype, weight.dtype), torch.float32)
        out = torch.empty(n, dtype=acc, device=hidden.device)
        lse = torch.empty(n, dtype=acc, device=hidden.device)
        # d logp_i / d h_i does not depend on the incoming gradient: unless told to recompute, it
        # is formed in this same chunk pass ([N, H], the size of the hidden states), so backward
        # only scales it. The lm_head gradient depends on every token's incoming gradient and is
        # always recomputed in backward.
        jac = None
        if ctx.needs_input_grad[0] and not recompute:
            jac = torch.empty(hidden.shape, dtype=acc, device=hidden.device)
        wf = weight.to(acc)
        with torch.no_grad():
            for s in range(0, n, chunk):
                z, t = _chunk_logits(hidden[s : s + chunk], weight, temperature, softcap)
                chunk_lse = torch.logsumexp(z, dim=-1)
                lse[s : s + chunk] = chunk_lse
                out[s : s + chunk] = z.gather(1, targets[s : s + chunk, None]).squeeze(1) - chunk_lse
                if jac is not None:
                    ones = torch.ones(z.shape[0], 1, dtype=acc, device=z.device)
                    g = _dlogp_dz(z, t, chunk_lse, targets[s : s + chunk], ones, temperature)
                    jac[s : s + chunk] = g @ wf
        ctx.save_for_backward(hidden, weight, targets, lse, jac if jac is not None else torch.empty(0))
        ctx.chunk, ctx.temperature, ctx.softcap, ctx.has_jac = chunk, temperature, softcap, jac is not None
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, targets, lse, jac = ctx.saved_tensors
        chunk, temperature, softcap = ctx.chunk, ctx.temperature, ctx.softcap
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        acc = lse.dtype
        grad_h: torch.Tensor | None = None
        if need_h and ctx.has_jac:
            grad_h = (jac * grad_out[:, None].to(acc)).to(hidden.dtype)
        recomputed_h = torch.empty_like(hidden) if need_h and grad_h is None else None
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        if recomputed_h is not None or grad_w is not None:
            wf = weight.to(acc)
            for s in range(0, hidden.shape[0], chunk):
                h = hidden[s : s + chunk]
                z, t = _chunk_logits(h, weight, temperature, softcap)  # recomputed, never stored
                go = grad_out[s : s + chunk, None].to(acc)
                g = _dlogp_dz(z, t, lse[s : s + chunk], targets[s : s + chunk], go, temperature)
                if recomputed_h is not None:
                    recomputed_h[s : s + chunk] = (g @ wf).to(hidden.dtype)
                if grad_w is not None:
                    grad_w.addmm_(g.t(), h.to(acc))
        if recomputed_h is not None:
            grad_h = recomputed_h
        return grad_h, (grad_w.to(weight.dtype) if grad_w is not None else None), None, None, None, None, None


def _dlogp_dz(z: torch.Tensor, t: torch.Tensor | None, lse: torch.Tensor, targets: torch.Tensor, go: torch.Tensor,
              temperature: float) -> torch.Tensor:
    """go * d logp / d z0 for one chunk, in place on z: (onehot(target) - softmax(z)) scaled by
    1/T and by the softcap's derivative 1 - tanh^2."""
    g = z.sub_(lse[:, None]).exp_().mul_(go.neg())
    g.scatter_add_(1, targets[:, None], go)
    if temperature != 1.0:
        g.div_(temperature)
    if t is not None:
        g.mul_(t.mul_(t).neg_().add_(1))
    return g


def token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    chunk_size: int | None = None,
    temperature: float = 1.0,
    softcap: float | None = None,
    recompute: bool = False,
) -> torch.Tensor:
    """Log-probabilities of `targets` [N] under ``softmax(softcap(hidden @ weight.T) / temperature)``.

    hidden: [N, H] final hidden states of the positions that predict the targets (flatten batch x
    sequence and select them first); weight: [V, H] the lm_head weight. Returns [N] in float32
    (float64 for float64 inputs).
    Memory: one chunk of logits at a time, in forward and backward. The lm_head gradient always
    comes from logits recomputed chunk by chunk in backward; the hidden-state gradient by default
    from per-token rows d logp / d h formed in the forward pass ([N, H], no extra matmul in
    backward), or with ``recompute=True`` from the recomputed logits too.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or targets.dim() != 1:
        raise ValueError("token_logprobs expects hidden [N, H], weight [V, H], targets [N]")
    if hidden.shape[0] != targets.shape[0] or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"shape mismatch: hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)}, targets {tuple(targets.shape)}")
    if hidden.shape[0] == 0:
        return hidden.new_zeros(0, dtype=torch.float32) + 0 * hidden.sum()
    chunk = chunk_size or auto_chunk_size(weight.shape[0], hidden.device)
    return _ChunkedLogprobs.apply(hidden, weight, targets.long(), int(chunk), float(temperature), softcap, bool(recompute))


def token_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, *, chunk_size: int | None = None, temperature: float = 1.0,
    softcap: float | None = None,
) -> torch.Tensor:
    """Per-token entropy of the same distribution, chunked, without grad. Returns float32 [N]."""
    chunk = chunk_size or auto_chunk_size(weight.shape[0], hidden.device)
    out = torch.empty(hidden.shape[0], dtype=torch.promote_types(hidden.dtype, torch.float32), device=hidden.device)
    with torch.no_grad():
        for s in range(0, hidden.shape[0], chunk):
            z, _ = _chunk_logits(hidden[s : s + chunk], weight, temperature, softcap)
            logp = torch.log_softmax(z, dim=-1)
            out[s : s + chunk] = -(logp.exp() * logp).sum(-1)
    return out


def naive_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0,
                         softcap: float | None = None) -> torch.Tensor:
    """The reference: full logits, log_softmax, gather (materialises tokens x vocab)."""
    z = hidden @ weight.t()
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    if softcap is not None:
        z = softcap * torch.tanh(z / softcap)
    return torch.log_softmax(z / temperature, dim=-1).gather(1, targets[:, None].long()).squeeze(1)


def chunked_autograd_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, chunk_size: int,
                              temperature: float = 1.0, softcap: float | None = None) -> torch.Tensor:
    """Chunked under plain autograd: every chunk's logits stay alive for backward (saves nothing)."""
    parts = [
        naive_token_logprobs(hidden[s : s + chunk_size], weight, targets[s : s + chunk_size], temperature=temperature, softcap=softcap)
        for s in range(0, hidden.shape[0], chunk_size)
    ]
    return torch.cat(parts)
