"""The REINFORCE learner, on the ``unstable_hf.training`` toolkit.

For each step of a batch: the exact token ids the policy saw and generated (prompt ids +
completion ids; text is never re-tokenized), prompt tokens masked out; the completion-token
logprobs come from the memory-bounded ``token_logprobs`` (the lm_head is never applied to all
positions at once).

    loss = - sum_i  A_i * sum_t logp(y_it) / norm_i  / batch_size

with ``norm_i`` the constant ``max_generation_len`` (Dr. GRPO) or the sequence's token count. With
``importance_sampling`` each token's logprob is weighted by the truncated ratio
``min(exp(logp - rollout_logp), is_cap)`` (detached). ``update`` makes one optimizer step, or
``epochs`` steps over the same batch with ``clip_ratio``: then each token's term is PPO's clipped
surrogate (Schulman et al. 2017)

    min(r_it * A_i, clip(r_it, 1 - eps, 1 + eps) * A_i),   r_it = exp(logp(y_it) - logp_0(y_it))

with ``logp_0`` the logprob at the update's first pass (kept per chunk, detached): there r = 1
and the gradient is REINFORCE's; later passes stop pushing a token once its ratio is past the clip.
"""

from __future__ import annotations

import torch

from unstable_core import Step
from unstable_hf.training import LoraLearner

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
            old = packed.rollout_logprobs
            ratio = torch.exp((logp.detach() - torch.where(torch.isnan(old), logp.detach(), old)).clamp(max=20))
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
