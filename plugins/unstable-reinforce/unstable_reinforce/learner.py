"""The REINFORCE learner, on the ``unstable_hf.training`` toolkit.

For each step of a batch: the exact token ids the policy saw and generated (prompt ids +
completion ids; text is never re-tokenized), prompt tokens masked out; the completion-token
logprobs come from the memory-bounded ``token_logprobs`` (the lm_head is never applied to all
positions at once).

    loss = - sum_i  A_i * sum_t logp(y_it) / norm_i  / batch_size

with ``norm_i`` the constant ``max_generation_len`` (Dr. GRPO) or the sequence's token count. With
``importance_sampling`` each token's logprob is weighted by the truncated ratio
``min(exp(logp - rollout_logp), is_cap)`` (detached). ``update`` makes exactly one optimizer step.
"""

from __future__ import annotations

import torch

from unstable_core import Step
from unstable_hf.training import LoraLearner


class ReinforceLearner(LoraLearner):
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
        loss = -(advantages * self.sequence_logprobs(packed, weight * logp)).sum() / batch_size
        stats["logp_mean"] = float(logp.detach().mean()) if logp.numel() else 0.0
        return loss, stats
