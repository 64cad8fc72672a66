"""The A2C learner, on the ``unstable_hf.training`` toolkit.

``prepare`` (once per update, without grad): the critic's V(s) for every step, per-turn rewards
(step rewards at each turn, the final reward at the last turn only), GAE over each player's own
turns, optionally z-scored advantages (their negative ones scaled by ``negative_advantage_scale``).
The z-score and the logged statistics (``explained_variance``, the means) are over the whole
batch: a data-parallel rank sums its shard's counts and sums with the others' (``batch_sums``),
so N ranks take the step one learner takes.
``loss`` (per chunk):

    policy = - sum_i A_i * sum_t logp(y_it) / norm_i  / batch_size
    value  = 0.5 * sum_i (V(s_i) - R_i)^2 / batch_size        (R_i = A_i + V_old(s_i), before z-scoring)

The policy's LoRA and the critic (its LoRA and value head) have their own AdamW optimizers and
learning rates; each makes one step per update. No step is filtered out: draws and zero rewards
teach the critic.
"""

from __future__ import annotations

from math import fsum
from pathlib import Path

import torch

from unstable_core import Step
from unstable_hf.training import LoraLearner

from .critic import Critic
from .gae import episodes, gae, turn_rewards
from .options import A2COptions


class A2CLearner(LoraLearner):
    options: A2COptions

    def build_modules(self) -> None:
        self.critic = Critic(self.policy, self.options, self.base_model)

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {**super().trainable(), **self.critic.named_parameters()}

    def make_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        critic = self.critic.named_parameters()
        policy = [p for n, p in self.trainable().items() if n not in critic]
        wd = self.options.weight_decay
        return {"policy": torch.optim.AdamW(policy, lr=self.options.lr, weight_decay=wd),
                "critic": torch.optim.AdamW(list(critic.values()), lr=self.options.critic_lr, weight_decay=wd)}

    def prepare(self, steps: list[Step]) -> dict[str, float | list[float]]:
        values: list[float] = []
        for chunk in self.chunks(steps):
            values += self.critic.values(self.pack(chunk)).tolist()
        advantages, returns = [0.0] * len(steps), [0.0] * len(steps)
        for idx in episodes(steps):
            adv, ret = gae(turn_rewards([steps[i] for i in idx]), [values[i] for i in idx],
                           self.options.gamma, self.options.gae_lambda)
            for i, a, r in zip(idx, adv, ret):
                advantages[i], returns[i] = a, r
        # statistics over the whole batch: data-parallel, every rank's shard (batch_sums)
        n, adv_sum, ret_sum, val_sum, res_sum = self.batch_sums(
            [len(steps), fsum(advantages), fsum(returns), fsum(values), fsum(r - v for r, v in zip(returns, values))])
        adv_mean, ret_mean, res_mean = (x / n if n else 0.0 for x in (adv_sum, ret_sum, res_sum))
        adv_sq, ret_sq, res_sq = self.batch_sums([fsum((a - adv_mean) ** 2 for a in advantages),
                                                  fsum((r - ret_mean) ** 2 for r in returns),
                                                  fsum((r - v - res_mean) ** 2 for r, v in zip(returns, values))])
        used = list(advantages)
        if self.options.normalize_advantages and n > 1:
            std = (adv_sq / n) ** 0.5
            used = [(a - adv_mean) / (std + 1e-8) for a in used]
        if (scale := self.options.negative_advantage_scale) != 1.0:
            used = [a * scale if a < 0 else a for a in used]
        return {"advantage": used, "return": returns, "value": values,  # per step: loss reads them by step
                "value_mean": val_sum / n if n else 0.0, "return_mean": ret_mean, "gae_advantage_mean": adv_mean,
                "explained_variance": 1.0 - res_sq / ret_sq if n > 1 and ret_sq > 0 else 0.0}

    def loss(self, steps: list[Step], batch_size: int) -> tuple[torch.Tensor, dict[str, float]]:
        packed = self.pack(steps)
        logp = self.policy.completion_logprobs(packed)
        adv, ret, old = (self.step_values(steps, name, logp.dtype) for name in ("advantage", "return", "value"))
        policy_loss = -(adv * self.sequence_logprobs(packed, logp)).sum() / batch_size
        value = self.critic.values(packed)
        error = (value - ret) ** 2
        if self.options.value_clip is not None:
            clipped = old + (value - old).clamp(-self.options.value_clip, self.options.value_clip)
            error = torch.maximum(error, (clipped - ret) ** 2)
        value_loss = 0.5 * error.sum() / batch_size
        scale = batch_size / len(steps)  # per-step means, so that the mean over chunks is the batch's
        return policy_loss + value_loss, {"policy_loss": float(policy_loss.detach()) * scale,
                                           "value_loss": float(value_loss.detach()) * scale}

    def save_extra(self, folder: Path) -> None:
        self.critic.save(folder)
