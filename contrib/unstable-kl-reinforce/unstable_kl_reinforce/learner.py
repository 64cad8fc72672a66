"""REINFORCE with a KL penalty to the frozen base policy, on the unstable-hf learner toolkit.

    loss = sum_i ( - A_i * sum_t logp(y_it)  +  kl_coef * sum_t penalty_it ) / norm_i  / batch_size

``ref`` is the base model's logprob (the adapter switched off, no grad). ``kl_estimator = "k3"``:
the penalty is k3 = exp(ref - logp) - (ref - logp) - 1, GRPO's (>= 0, zero where the adapter leaves
the base policy unchanged; its value estimates KL(pi || ref), but its gradient is that of KL(ref ||
pi) at each token's prefix). ``"k1-score"``: logp times the detached log-ratio to go,
sum_{t' >= t} (logp - ref): its gradient is the score-function estimate of KL(pi || ref)'s over
completions, unbiased on completions drawn from pi (top_p = 1) with the constant normaliser (with
``normalizer = "tokens"`` it is refused: ``plugin.check_kl_learner``). Both terms share the
normaliser (``max_generation_len`` or the token count), as in GRPO, so ``kl_coef`` weighs the KL against the policy gradient whatever the normaliser. The
base learner does the rest: packing, chunks, clipping, checkpoints.
"""

import torch

from unstable_core import Step
from unstable_hf.training import LoraLearner

from .options import KLReinforceOptions


def kl_penalty(logp: torch.Tensor, ref: torch.Tensor, rows: torch.Tensor, estimator: str) -> torch.Tensor:
    """Each token's penalty term [N]; ``rows`` [N]: each token's step (a step's tokens in order)."""
    if estimator == "k3":
        return torch.exp(ref - logp) - (ref - logp) - 1
    log_ratio = (logp - ref).detach()
    per_step = torch.zeros(int(rows[-1]) + 1 if len(rows) else 0, dtype=logp.dtype, device=logp.device)
    per_step = per_step.index_add(0, rows, log_ratio)
    before = torch.cumsum(per_step, 0) - per_step  # the steps before each step
    to_go = per_step[rows] - (torch.cumsum(log_ratio, 0) - before[rows]) + log_ratio
    return logp * to_go


class KLReinforce(LoraLearner):
    options: KLReinforceOptions

    def loss(self, steps: list[Step], batch_size: int) -> tuple[torch.Tensor, dict[str, float]]:
        packed = self.pack(steps)
        logp = self.policy.completion_logprobs(packed)
        ref = self.policy.completion_logprobs(packed, adapter=False)
        kl = torch.exp(ref - logp) - (ref - logp) - 1  # k3, the logged estimate of KL(pi || ref)
        penalty = kl_penalty(logp, ref, packed.rows, self.options.kl_estimator)
        advantages = packed.tensor([s.reward for s in steps], dtype=logp.dtype)
        pg = -(advantages * self.sequence_logprobs(packed, logp)).sum()
        loss = (pg + self.options.kl_coef * self.sequence_logprobs(packed, penalty).sum()) / batch_size
        return loss, {"kl": float(kl.detach().mean())}
