"""Per-step values a learner's ``prepare`` computes for the whole batch and ``loss`` reads for its
chunk, by step (its game, seat and turn), not by object identity: chunks may be copies, and a
step's position in the batch is not its position in a chunk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from unstable_core import Step


def step_key(step: Step) -> tuple[int, int, int]:
    """What names a step within a batch: its game, its seat and its turn."""
    return step.game_idx, step.player_id, step.turn_index


class StepValues:
    """Named per-step values of one batch."""

    def __init__(self) -> None:
        self.values: dict[str, list[float]] = {}
        self.positions: dict[tuple[int, int, int], list[int]] = {}

    def split(self, steps: Sequence[Step], prepared: Mapping[str, Any]) -> dict[str, float]:
        """Keep the per-step values of ``prepared`` (a list or 1-d tensor of one number per step
        of ``steps``, in order); return its numbers (metrics to log)."""
        self.values, metrics = {}, {}
        for name, value in prepared.items():
            if isinstance(value, torch.Tensor) and value.dim() == 0:
                value = float(value)
            if isinstance(value, (int, float)):
                metrics[name] = float(value)
                continue
            values = value.detach().flatten().tolist() if isinstance(value, torch.Tensor) else [float(v) for v in value]
            if len(values) != len(steps):
                raise ValueError(f"prepare returned {len(values)} values of {name!r} for a batch of {len(steps)} steps")
            self.values[name] = values
        self.positions = {}
        for i, s in enumerate(steps):
            self.positions.setdefault(step_key(s), []).append(i)
        return metrics

    def of(self, steps: Sequence[Step], name: str) -> list[float]:
        """The values of ``name`` for ``steps`` (a chunk of the batch), in their order."""
        if name not in self.values:
            raise KeyError(f"prepare returned no per-step values named {name!r} (it returned: {', '.join(self.values) or 'none'})")
        values, out = self.values[name], []
        for s in steps:
            found = {values[i] for i in self.positions[step_key(s)]}
            if len(found) > 1:  # the same step twice in a batch, with different values
                raise ValueError(f"prepare gave {name!r} {sorted(found)} to the steps of game {s.game_idx}, seat "
                                 f"{s.player_id}, turn {s.turn_index}: which is this one's?")
            out.append(found.pop())
        return out
