"""Steps into tensors: each step's exact rollout token ids (never re-tokenized), with the
positions that predict completion tokens, the targets, each token's row and rollout logprob.

Two layouts, the same ``Packed`` for both: ``pack`` right-pads one row per step; ``pack_shared``
puts the steps into a prefix trie (two steps share a node only where their ids agree from
position 0), so that every token the steps share is computed once (see ``prefix.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

import torch

from unstable_core import Step


@dataclass
class Sequence:
    prompt: list[int]
    completion: list[int]
    rollout_logprobs: list[float]  # may be shorter than completion (unknown: nan when packed)

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.completion


def sequences(steps: list[Step], max_train_len: int | None = None) -> list[Sequence]:
    """The rollout token ids of each step; with ``max_train_len`` the prompt loses its beginning
    first (at least one prompt token stays), then the completion its end."""
    out = []
    for s in steps:
        prompt, completion = list(s.turn.prompt_token_ids), list(s.turn.completion_token_ids)
        if not completion:
            raise ValueError(f"step of game {s.game_idx} has no completion token ids: train on rollout ids only")
        old = list(s.turn.logprobs)
        if max_train_len is not None and len(prompt) + len(completion) > max_train_len:
            prompt = prompt[-max(1, max_train_len - len(completion)) :]
            completion = completion[: max_train_len - len(prompt)]
            old = old[: len(completion)]
        if not prompt:
            raise ValueError(f"step of game {s.game_idx} has no prompt token ids")
        out.append(Sequence(prompt, completion, old))
    return out


@dataclass
class Packed:
    """Rows [R, W] to forward and, for the N completion tokens of all B steps, where the hidden
    state that predicts each one sits, its target, its step and its rollout logprob (nan where
    unknown). Positions index the rows flattened ([R * W]); several tokens may share one."""

    ids: torch.Tensor
    attention: Any  # [R, W] padding mask, [R, 1, W, W] additive mask (0 / -inf), or a FlexAttention BlockMask
    position_ids: torch.Tensor | None  # None: 0, 1, 2, ... in each row
    predict_index: torch.Tensor  # [N]: position predicting each completion token
    last_prompt_index: torch.Tensor  # [B]: position of each step's last prompt token (where the action starts)
    targets: torch.Tensor
    rows: torch.Tensor  # [N]: the step of each completion token
    rollout_logprobs: torch.Tensor
    completion_lengths: torch.Tensor  # [B]
    forward_tokens: int  # positions the forward computes (padding excluded)
    sequence_tokens: int  # prompt + completion tokens of all steps
    segments: list[Any] | None = None  # cached-prefix segments (``segments.py``): then ``ids`` is [1, T], only a shape

    def per_step(self, per_token: torch.Tensor) -> torch.Tensor:
        """Sum a per-token tensor [N] over each step's completion: [B]."""
        out = torch.zeros(len(self.completion_lengths), device=per_token.device, dtype=per_token.dtype)
        return out.index_add(0, self.rows, per_token)

    def tensor(self, values: list[float], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Per-step numbers on this batch's device."""
        return torch.tensor(values, device=self.ids.device, dtype=dtype or torch.float32)

    def at(self, hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Hidden states [R, W, H] at flat positions ``index``: [len(index), H]."""
        return hidden.flatten(0, 1)[index]


class CompletionFields(TypedDict):
    targets: torch.Tensor
    rows: torch.Tensor
    rollout_logprobs: torch.Tensor
    completion_lengths: torch.Tensor


def completion_fields(seqs: list[Sequence], device: Any) -> CompletionFields:
    """targets, rows, rollout logprobs and completion lengths: the same in both layouts."""
    targets: list[int] = []
    rows: list[int] = []
    old: list[float] = []
    for i, s in enumerate(seqs):
        targets += s.completion
        rows += [i] * len(s.completion)
        old += s.rollout_logprobs + [float("nan")] * (len(s.completion) - len(s.rollout_logprobs))
    return CompletionFields(
        targets=torch.tensor(targets, device=device), rows=torch.tensor(rows, device=device),
        rollout_logprobs=torch.tensor(old, device=device),
        completion_lengths=torch.tensor([len(s.completion) for s in seqs], device=device),
    )


def pack(seqs: list[Sequence], device: Any = "cpu") -> Packed:
    """One right-padded row per step."""
    width = max(len(s.ids) for s in seqs)
    n = len(seqs)
    ids = torch.zeros((n, width), dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    predict: list[int] = []
    for i, s in enumerate(seqs):
        ids[i, : len(s.ids)] = torch.tensor(s.ids)
        attention[i, : len(s.ids)] = 1
        predict += range(i * width + len(s.prompt) - 1, i * width + len(s.ids) - 1)
    tokens = sum(len(s.ids) for s in seqs)
    return Packed(
        ids=ids.to(device), attention=attention.to(device), position_ids=None,
        predict_index=torch.tensor(predict, device=device),
        last_prompt_index=torch.tensor([i * width + len(s.prompt) - 1 for i, s in enumerate(seqs)], device=device),
        forward_tokens=tokens, sequence_tokens=tokens, **completion_fields(seqs, device),
    )
