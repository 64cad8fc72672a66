"""The REINFORCE learner, on the ``unstable_hf.training`` toolkit.

For each step of a batch: the exact token ids the policy saw and generated (prompt ids +
completion ids; text is never re-tokenized), prompt tokens masked out; the completion-token
logprobs come from the memory-bounded ``token_logprobs`` (the lm_head is never applied to all
positions at once).

    loss = - sum_i  A_i * sum_t logp(y_it) / norm_i  / batch_size

with ``norm_i`` the constant ``max_generation_len`` (Dr. GRPO) or the sequence's token count. With
``importance_sampling`` each token's logprob is weighted by the truncated ratio
``min(exp(logp_0 - rollout_logp), is_cap)`` (detached), ``logp_0`` the logprob at the update's
first pass; the rows of a step answered among choices (``expand_choices``) all by the decision's
``min(pi(c) / pi_old(c), is_cap)`` instead (``choice_ratios``), their advantages' baseline re-formed
with the policy at the update's start in place of the drawing policy's. ``update`` makes one optimizer step, or
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

import math
from typing import Any

import torch

from unstable_core import Step
from unstable_core.choices import common_prefix, deciding_end
from unstable_hf.step_values import step_key
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
            if any(s.turn.choice_token_ids for s in steps):  # a decision's ratio on each of its rows
                chosen = self.step_values(steps, "choice_ratio", dtype=ratio.dtype)[packed.rows]
                ratio = torch.where(torch.isnan(chosen), ratio, chosen)
            weight = torch.clamp(ratio, max=self.options.is_cap)
            stats["is_ratio_mean"] = float(ratio.mean())
            stats["is_clipped_frac"] = float((ratio > self.options.is_cap).float().mean())
        advantages = packed.tensor([self.choice_advantages.get(choice_row(s), s.reward) for s in steps], dtype=logp.dtype)
        if self.options.clip_ratio is not None:
            loss = -self.sequence_logprobs(packed, weight * self.clipped_surrogate(logp, advantages[packed.rows], stats)).sum() / batch_size
        else:
            loss = -(advantages * self.sequence_logprobs(packed, weight * logp)).sum() / batch_size
        stats["logp_mean"] = float(logp.detach().mean()) if logp.numel() else 0.0
        return loss, stats

    choice_advantages: dict[tuple[int, int, int, tuple[int, ...]], float] = {}  # by choice_row; set by prepare

    def prepare(self, steps: list[Step]) -> dict[str, Any] | None:
        """With ``importance_sampling`` and steps answered among choices: ``choice_ratio``, the
        correction of each such decision on every one of its rows (``choice_ratios``; nan for the
        other steps), and its mean over those rows, ``choice_ratio_mean``; and each row's advantage
        re-formed with the policy at the update's start (``choice_advantages``)."""
        self.choice_advantages = {}
        if not self.options.importance_sampling or not any(s.turn.choice_token_ids for s in steps):
            return None
        ratios = self.choice_ratios(steps)
        known = [r for r in ratios if not math.isnan(r)]
        return {"choice_ratio": ratios, **({"choice_ratio_mean": math.fsum(known) / len(known)} if known else {})}

    def choice_ratios(self, steps: list[Step]) -> list[float]:
        """For each row of a decision answered among choices (``expand_choices``: the rows of one
        decision share its game, seat and turn), ``pi(c) / pi_old(c)``: the chosen answer's
        probability renormalised over the offered answers, under the policy at the update's start
        (every answer scored whole, its end token included, as the backend scored it) and as the
        backend drew it (``choice_probabilities``). The chosen row is the one with rollout
        logprobs; a decision without one, and every other step, gets nan (the per-token ratio).

        Each row of such a decision that carries its step's terms (``Step.choice_advantage``,
        ``choice_mass``) gets in ``self.choice_advantages`` the advantage ``expand_choices`` gives
        it, ``A * ([a = c] - pi_0(a)) + mass * pi_0(a)``, with ``pi_0`` (the update's start) where
        the row's reward has the drawing policy's ``pi_old``: the rows' step is then
        ``A * grad log pi(c) + mass * grad log sum_a p(a)`` at the update's start whatever
        ``pi_old`` was, which the ratio corrects to the expected step under ``pi``; with
        ``pi_old``'s baseline it is ``A * (grad log p(c) - sum_a pi_old(a) grad log p(a))``, whose
        weighted expectation is not the policy's gradient once the policy moved."""
        out = [math.nan] * len(steps)
        decisions: dict[tuple[int, int, int], list[int]] = {}
        for i, s in enumerate(steps):
            if s.turn.choice_token_ids:
                decisions.setdefault(step_key(s), []).append(i)
        scored: list[tuple[list[int], int, float, list[Step], list[list[int]]]] = []
        for rows in decisions.values():
            turn = steps[rows[0]].turn
            choices = [list(ids) for ids in turn.choice_token_ids]
            shared = common_prefix(choices)
            drawn = [steps[i].turn.completion_token_ids for i in rows if steps[i].turn.logprobs]
            deciding = [ids[shared:deciding_end(ids, choices)] for ids in choices]
            if len(drawn) != 1 or list(drawn[0]) not in deciding or len(turn.choice_probabilities) != len(choices):
                continue
            c = deciding.index(list(drawn[0]))
            if turn.choice_probabilities[c] <= 0:
                continue
            # the rows' prompt is the decision's prompt and the offered answers' shared prefix
            whole = [steps[rows[0]].model_copy(update={"turn": turn.model_copy(update={
                "completion_token_ids": ids[shared:], "logprobs": []})}) for ids in choices]
            scored.append((rows, c, turn.choice_probabilities[c], whole, deciding))
        if not scored:
            return out
        answers = [s for *_, whole, _ in scored for s in whole]  # a decision's answers side by side: they share its prompt
        totals = []
        for chunk in self.chunks(answers):
            packed = self.pack(chunk)
            totals += packed.per_step(self.policy.completion_logprobs(packed).double()).tolist()
        at = 0
        for rows, c, old, whole, deciding in scored:
            logq = torch.tensor(totals[at : at + len(whole)], dtype=torch.float64)
            at += len(whole)
            start = torch.softmax(logq, 0).tolist()  # pi_0 of each offered answer
            ratio = start[c] / old
            for i in rows:
                out[i] = ratio
                row = steps[i]
                ids = list(row.turn.completion_token_ids)
                if row.choice_advantage is not None and ids in deciding:
                    a = deciding.index(ids)
                    self.choice_advantages[choice_row(row)] = (row.choice_advantage * (float(a == c) - start[a])
                                                               + row.choice_mass * start[a])
        return out

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


def choice_row(step: Step) -> tuple[int, int, int, tuple[int, ...]]:
    """What names a row of a decision answered among choices within a batch: its step (game, seat,
    turn) and its answer's token ids (the rows of one decision share the step)."""
    return (*step_key(step), tuple(step.turn.completion_token_ids))
