"""Sampling in which every request draws from its own seed, whatever batch it is served in.

``transformers``' own sampling draws the tokens of a whole batch from one random stream, so a
request's completion depends on which requests shared its batch and in which order. Here a
logits processor, run last, draws each row's token with that row's ``torch.Generator``
(temperature and top-p applied) and leaves only that token possible; generation then runs
greedily and picks it.
"""

from __future__ import annotations

from typing import Any

import torch


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` with everything outside each row's top-p nucleus set to zero (the most likely
    token always stays)."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


class PerRequestSampler:
    """A ``LogitsProcessor``: row ``i`` samples from ``Generator(seeds[i])``. It also keeps each
    drawn token's logprob under the tempered distribution (before top-p), a ``[B]`` tensor per
    generated position (``logprobs()``), so that generation need not keep every position's
    ``[B, V]`` logits (``output_logits``) until it ends."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float) -> None:
        self.seeds = [int(s) for s in seeds]
        self.generators: list[torch.Generator] = []
        self.temperature, self.top_p = temperature, top_p
        self.chosen_logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: Any, scores: torch.Tensor) -> torch.Tensor:
        # draws on the scores' device: copying a 150k-token vocabulary to the CPU at every
        # generated token made GPU generation CPU-bound
        if not self.generators:
            self.generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.seeds]
        tempered = scores.float() / self.temperature
        probs = nucleus(torch.softmax(tempered, dim=-1), self.top_p)
        chosen = torch.stack([torch.multinomial(row, 1, generator=g) for row, g in zip(probs, self.generators)])
        self.chosen_logprobs.append(torch.log_softmax(tempered, dim=-1).gather(-1, chosen)[:, 0])
        return torch.full_like(scores, float("-inf")).scatter(-1, chosen, 0.0)

    def logprobs(self) -> torch.Tensor:
        """``[B, T]``: the logprob of the token drawn at each of the ``T`` positions so far."""
        return torch.stack(self.chosen_logprobs, dim=1)
