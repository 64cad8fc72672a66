"""REINFORCE with a KL penalty to the frozen base policy, on the unstable-hf learner toolkit.

    loss = sum_i ( - A_i * sum_t logp(y_it)  +  kl_coef * sum_t k3_it ) / norm_i  / batch_size

k3 = exp(ref - logp) - (ref - logp) - 1 is the per-token KL estimate GRPO uses (>= 0, zero where
the adapter leaves the base policy unchanged); ``ref`` is the base model's logprob (the adapter
switched off, no grad). Both terms share the normaliser (``max_generation_len`` or the token
count), as in GRPO, so ``kl_coef`` weighs the KL against the policy gradient whatever the
normaliser. The base learner does the rest: packing, chunks, clipping, checkpoints.
"""

import torch

from unstable_core import Step
from unstable_hf.training import LoraLearner

from .options import KLReinforceOptions


class KLReinforce(LoraLearner):
    options: KLReinforceOptions

    def loss(self, steps: list[Step], batch_size: int) -> tuple[torch.Tensor, dict[str, float]]:
        packed = self.pack(steps)
        logp = self.policy.completion_logprobs(packed)
        ref = self.policy.completion_logprobs(packed, adapter=False)
        log_ratio = ref - logp
        kl = torch.exp(log_ratio) - log_ratio - 1
        advantages = packed.tensor([s.reward for s in steps], dtype=logp.dtype)
        pg = -(advantages * self.sequence_logprobs(packed, logp)).sum()
        loss = (pg + self.options.kl_coef * self.sequence_logprobs(packed, kl).sum()) / batch_size
        return loss, {"kl": float(kl.detach().mean())}
