"""The REINFORCE learner, on the ``unstable_hf.training`` toolkit.

For each step of a batch: the exact token ids the policy saw and generated (prompt ids +
completion ids; text is never re-tokenized), prompt tokens masked out; the completion-token
logprobs come from the memory-bounded ``token_logprobs`` (the lm_head is never applied to all
positions at once).

    loss = - sum_i  A_i * sum_t logp(y_it) / norm_i  / batch_size

with ``norm_i`` the constant ``max_generation_len`` (Dr. GRPO) or the sequence's token count. With
``importance_sampling`` each token's logprob is weighted by the truncated ratio
``min(exp(logp_0 - rollout_logp), is_cap)`` (detached), ``logp_0`` the logprob at the update's
first pass. ``update`` makes one optimizer step, or
``epochs`` steps over the same batch with ``clip_ratio``: then each token's term is PPO's clipped
surrogate (Schulman et al. 2017)

    min(r_it * A_i, clip(r_it, 1 - eps, 1 + eps) * A_i),   r_it = exp(logp(y_it) - logp_0(y_it))

with ``logp_0`` the logprob at the update's first pass (kept per chunk, detached): there r = 1
and the gradient is REINFORCE's; later passes stop pushing a token once its ratio is past the clip.
The IS weight stays the first pass's on every pass: the term is ``min(pi_0 / pi_roll, is_cap) *
min(r A, clip(r) A)``, decoupled PPO (Hilton et al. 2021, "Batch size-invariance for policy
optimization"; AReaL) with the rollout's policy as the behaviour policy and the update's start as
the proximal one.
"""

from __future__ import annotations

import torch

from unstable_core import Step
from unstable_hf.training import LoraLearner, Packed

from .options import ReinforceOptions


class ReinforceLearner(LoraLearner):
    options: ReinforceOptions

    def epochs(self) -> int:
        return self.options.epochs

    def loss(self, steps: list[Step], batch_size: int) -> tuple[torch.Tensor, dict[str, float]]:
        packed = self.pack(steps)
        logp = self.policy.completion_logprobs(packed)
        weight = torch.ones_like(logp)
        stats: dict[str, float] = {}
        if self.options.importance_sampling:
            ratio = self.rollout_ratio(packed, logp)
            weight = torch.clamp(ratio, max=self.options.is_cap)
            stats["is_ratio_mean"] = float(ratio.mean())
            stats["is_clipped_frac"] = float((ratio > self.options.is_cap).float().mean())
        advantages = packed.tensor([s.reward for s in steps], dtype=logp.dtype)
        if self.options.clip_ratio is not None:
            loss = -self.sequence_logprobs(packed, weight * self.clipped_surrogate(logp, advantages[packed.rows], stats)).sum() / batch_size
        else:
            loss = -(advantages * self.sequence_logprobs(packed, weight * logp)).sum() / batch_size
        stats["logp_mean"] = float(logp.detach().mean()) if logp.numel() else 0.0
        return loss, stats

    def rollout_ratio(self, packed: Packed, logp: torch.Tensor) -> torch.Tensor:
        """Each token's ``exp(logp_0 - rollout_logp)`` (1 where the rollout logprob is unknown),
        ``logp_0`` the update's first pass: computed there and kept per chunk (detached), so that
        every pass weighs a token alike (decoupled PPO: the rollout's is the behaviour policy, the
        update's start the proximal one)."""
        if self.epoch == 0:
            if self.chunk_index == 0:
                self.start_ratios: list[torch.Tensor] = []
            old, now = packed.rollout_logprobs, logp.detach()
            self.start_ratios.append(torch.exp((now - torch.where(torch.isnan(old), now, old)).clamp(max=20)))
        return self.start_ratios[self.chunk_index]

    def clipped_surrogate(self, logp: torch.Tensor, advantage: torch.Tensor, stats: dict[str, float]) -> torch.Tensor:
        """Each token's PPO term for this chunk, its ``logp`` against the same chunk's logprobs at
        the update's first pass; ``advantage`` per token. Adds ``ratio_mean`` and ``clipped_frac``
        (the tokens whose clipped term was the smaller) to ``stats``."""
        if self.epoch == 0:
            if self.chunk_index == 0:
                self.start_logprobs: list[torch.Tensor] = []
            self.start_logprobs.append(logp.detach())
        ratio = torch.exp(logp - self.start_logprobs[self.chunk_index])
        eps = float(self.options.clip_ratio or 0.0)
        unclipped, clipped = ratio * advantage, ratio.clamp(1 - eps, 1 + eps) * advantage
        if logp.numel():
            stats["ratio_mean"] = float(ratio.detach().mean())
            stats["clipped_frac"] = float((clipped.detach() < unclipped.detach()).float().mean())
        return torch.minimum(unclipped, clipped)
