"""The live check of every update: rollout logprobs against the learner's, on the steps that the
weights being updated played.

A step whose ``policy_version`` equals the learner's ``version`` was sampled by the weights the
update starts from: at the update's first pass, before any optimizer step, the learner's
logprob of each of its completion tokens should equal the one the inference backend reported
when it sampled it. ``LogprobGap`` measures the difference on every such token whose rollout
logprob is known (a backend that reports none gives NaN: skipped) and reports, per update,

* ``logprob_gap_tokens``: tokens compared (0: no step of the batch was played by these weights,
  e.g. between checkpoints, or no rollout logprob was reported; then the two below are absent),
* ``logprob_gap_mean``: mean of |learner - rollout| over them, in nats,
* ``logprob_gap_max``: the largest.

``LoraLearner`` wires it: ``pack`` hands it each pack its ``loss`` makes in the first pass
(``watch``), ``Policy.completion_logprobs`` hands it the policy's logprobs of that pack
(``observe``: once per pack; the frozen base model's, ``adapter=False``, are not compared).
The driver warns once per run when ``logprob_gap_mean`` passes ``training.logprob_gap_tolerance``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from unstable_core import Step

from .packing import Packed


class LogprobGap:
    """Sums of |learner - rollout| logprob over one update's on-policy tokens (see the module)."""

    def __init__(self) -> None:
        self.watching = False
        self.pending: list[tuple[Packed, torch.Tensor]] = []  # packs of the current loss call and their token masks
        self.reset()

    def reset(self) -> None:
        self.total, self.tokens, self.largest = 0.0, 0, 0.0

    @contextmanager
    def first_pass(self, on: bool) -> Iterator[None]:
        """Around one ``loss`` call: compare the packs it makes when ``on`` (the update's first
        pass); forget them after."""
        self.watching = on
        try:
            yield
        finally:
            self.watching, self.pending = False, []

    def watch(self, packed: Packed, steps: list[Step], version: int) -> None:
        """Compare this pack's tokens of the steps played by ``version`` when its policy
        logprobs are computed."""
        if not self.watching:
            return
        played = torch.tensor([s.turn.policy_version == version for s in steps], dtype=torch.bool,
                              device=packed.rows.device)
        mask = played[packed.rows] & ~torch.isnan(packed.rollout_logprobs)
        if bool(mask.any()):
            self.pending.append((packed, mask))

    def observe(self, packed: Packed, logp: torch.Tensor) -> None:
        """The policy's logprobs [N] of a pack: compared once, if the pack is watched."""
        for i, (watched, mask) in enumerate(self.pending):
            if watched is packed:
                del self.pending[i]
                gap = (logp.detach().double() - packed.rollout_logprobs.double())[mask].abs()
                self.total += float(gap.sum())
                self.tokens += int(gap.numel())
                self.largest = max(self.largest, float(gap.max()))
                return

    def metrics(self, distributed: bool = False, device: Any = "cpu") -> dict[str, float]:
        """This update's figures (summed over the data-parallel ranks: every rank calls it); starts
        the next update's sums."""
        total, tokens, largest = self.total, float(self.tokens), self.largest
        if distributed:
            import torch.distributed as dist

            sums = torch.tensor([total, tokens], dtype=torch.float64, device=device)
            top = torch.tensor([largest], dtype=torch.float64, device=device)
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
            dist.all_reduce(top, op=dist.ReduceOp.MAX)
            (total, tokens), largest = sums.tolist(), float(top)
        self.reset()
        if not tokens:
            return {"logprob_gap_tokens": 0.0}
        return {"logprob_gap_tokens": tokens, "logprob_gap_mean": total / tokens, "logprob_gap_max": largest}
