"""Group baselines for grouped games (``collection.group_size``): GRPO, Dr. GRPO, RLOO.

A group is the games played from the same seed and seats (``Step.group_id``), seen from one seat
(``Step.player_id``); a step whose ``group_id`` is None is a group of one game. Within a group each
game (episode) counts once whatever its number of turns: its value is the mean reward of its
steps. A step's advantage is its reward minus the baseline of its game:

    mean            the mean value of the group's games (GRPO, Dr. GRPO)
    leave-one-out   the mean value of the group's other games (RLOO; a group of one game: 0)

and with ``scale = "std"`` divided by the standard deviation of the group's game values plus
``eps`` (GRPO); a group whose games all have the same value gives zeros.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

from .types import Step

Baseline = Literal["mean", "leave-one-out"]
Scale = Literal["none", "std"]

__all__ = ["group_advantages", "group_keys"]


def group_keys(steps: Sequence[Step]) -> list[Hashable]:
    """The group of each step: (group id, seat); an ungrouped step's game is its group."""
    return [(("group", s.group_id) if s.group_id is not None else ("game", s.game_idx), s.player_id) for s in steps]


def group_advantages(steps: Sequence[Step], baseline: Baseline = "mean", scale: Scale = "none", eps: float = 1e-8) -> list[float]:
    """Each step's reward minus its group's baseline (see the module's docstring), in order."""
    games: dict[Hashable, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, key in enumerate(group_keys(steps)):
        games[key][steps[i].game_idx].append(i)
    out = [0.0] * len(steps)
    for by_game in games.values():
        values = {g: math.fsum(steps[i].reward for i in idx) / len(idx) for g, idx in by_game.items()}
        k, total = len(values), math.fsum(values.values())
        mean = total / k
        same = all(v == mean for v in values.values())
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values.values()) / k)
        for g, idx in by_game.items():
            if baseline == "mean":
                base = mean
            else:
                base = (total - values[g]) / (k - 1) if k > 1 else values[g]
            for i in idx:
                advantage = steps[i].reward - base
                if scale == "std":
                    advantage = 0.0 if same else advantage / (std + eps)
                out[i] = advantage
    return out
