"""Steps into tensors: each step's exact rollout token ids (never re-tokenized), right-padded,
with the positions that predict completion tokens, the targets, each token's row and rollout
logprob."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from unstable_core import Step


@dataclass
class Sequence:
    prompt: list[int]
    completion: list[int]
    rollout_logprobs: list[float]  # may be shorter than completion (unknown: nan when packed)


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
    """Right-padded rows [B, W] and, for the N completion tokens of all rows, their targets, row
    and rollout logprob (nan where unknown)."""

    ids: torch.Tensor
    attention: torch.Tensor
    predicts: torch.Tensor  # bool [B, W]: the position predicts a completion token
    last_prompt: torch.Tensor  # [B]: position of each row's last prompt token (where the action starts)
    targets: torch.Tensor
    rows: torch.Tensor
    rollout_logprobs: torch.Tensor
    completion_lengths: torch.Tensor  # [B]

    def per_step(self, per_token: torch.Tensor) -> torch.Tensor:
        """Sum a per-token tensor [N] over each row's completion: [B]."""
        out = torch.zeros(len(self.completion_lengths), device=per_token.device, dtype=per_token.dtype)
        return out.index_add(0, self.rows, per_token)

    def tensor(self, values: list[float], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Per-row numbers on this batch's device."""
        return torch.tensor(values, device=self.ids.device, dtype=dtype or torch.float32)


def pack(seqs: list[Sequence], device: Any = "cpu") -> Packed:
    width = max(len(s.prompt) + len(s.completion) for s in seqs)
    n = len(seqs)
    ids = torch.zeros((n, width), dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    predicts = torch.zeros((n, width), dtype=torch.bool)
    targets: list[int] = []
    rows: list[int] = []
    old: list[float] = []
    for i, s in enumerate(seqs):
        seq = s.prompt + s.completion
        ids[i, : len(seq)] = torch.tensor(seq)
        attention[i, : len(seq)] = 1
        predicts[i, len(s.prompt) - 1 : len(seq) - 1] = True
        targets += s.completion
        rows += [i] * len(s.completion)
        old += s.rollout_logprobs + [float("nan")] * (len(s.completion) - len(s.rollout_logprobs))
    return Packed(
        ids=ids.to(device), attention=attention.to(device), predicts=predicts.to(device),
        last_prompt=torch.tensor([len(s.prompt) - 1 for s in seqs], device=device),
        targets=torch.tensor(targets, device=device), rows=torch.tensor(rows, device=device),
        rollout_logprobs=torch.tensor(old, device=device),
        completion_lengths=torch.tensor([len(s.completion) for s in seqs], device=device),
    )
