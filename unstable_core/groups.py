"""Group baselines for grouped games (``collection.group_size``): GRPO, Dr. GRPO, RLOO.

A group is the games played from the same seed and seats (``Step.group_id``), seen from one seat
(``Step.player_id``); a step whose ``group_id`` is None is a group of one game. Within a group each
game (episode) counts once whatever its number of turns: its value is the mean reward of its
steps. A step's advantage is its reward minus the baseline of its game:

    mean            the mean value of the group's games (GRPO, Dr. GRPO)
    leave-one-out   the mean value of the group's other games (RLOO)

and with ``scale = "std"`` divided by the standard deviation of the group's game values plus
``eps`` (GRPO): the population std (divided by k, the default: the advantages of a group then have
unit mean square) or, with ``std = "sample"``, the sample std (divided by k - 1, torch.std's
default, as TRL's and verl's GRPO compute it: advantages sqrt((k - 1) / k) of the population's,
0.935 for k = 8). A group whose games all have the same value (equal to 1e-12, relative or
absolute: three games of 0.1 average to 0.1 + 1.4e-17) gives exact zeros. So does a group of one
game (a group some of whose games failed, or an ungrouped step), under either baseline: there is
no other game to compare with, and its own value would be a baseline that depends on its own
actions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Literal

from .types import Step

Baseline = Literal["mean", "leave-one-out"]
Scale = Literal["none", "std"]
Std = Literal["population", "sample"]

__all__ = ["group_advantages", "group_keys", "group_spread"]


def group_keys(steps: Sequence[Step]) -> list[Hashable]:
    """The group of each step: (group id, seat); an ungrouped step's game is its group."""
    return [(("group", s.group_id) if s.group_id is not None else ("game", s.game_idx), s.player_id) for s in steps]


def group_advantages(steps: Sequence[Step], baseline: Baseline = "mean", scale: Scale = "none", eps: float = 1e-8,
                     std: Std = "population") -> list[float]:
    """Each step's reward minus its group's baseline (see the module's docstring), in order."""
    games: dict[Hashable, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, key in enumerate(group_keys(steps)):
        games[key][steps[i].game_idx].append(i)
    out = [0.0] * len(steps)
    for by_game in games.values():
        values = {g: math.fsum(steps[i].reward for i in idx) / len(idx) for g, idx in by_game.items()}
        k, total = len(values), math.fsum(values.values())
        if k == 1:  # nothing to compare with: zeros (already in ``out``)
            continue
        mean = total / k
        # no spread: equal values within rounding (fsum([0.1] * 3) / 3 != 0.1); each game is its own baseline,
        # so a step that has its game's value gets an exact 0 (which drop_zero_advantage drops)
        same = all(math.isclose(v, mean, rel_tol=1e-12, abs_tol=1e-12) for v in values.values())
        spread = math.sqrt(math.fsum((v - mean) ** 2 for v in values.values()) / (k - 1 if std == "sample" else k))
        for g, idx in by_game.items():
            base = values[g] if same else mean if baseline == "mean" else (total - values[g]) / (k - 1)
            for i in idx:
                advantage = steps[i].reward - base
                if scale == "std":
                    advantage = 0.0 if same else advantage / (spread + eps)
                out[i] = advantage
    return out


def group_spread(steps: Sequence[Step]) -> dict[str, float]:
    """How much the games of each group differ, over the groups of two or more games (a group of
    one has no spread to measure): ``group_reward_std_mean``, the mean of their population std of
    game values, and ``group_zero_std_frac``, the share of them whose games all have the same value
    (as ``group_advantages`` decides: such a group gives zero advantages; TRL's
    ``frac_reward_zero_std``). Empty when no group has two games."""
    games: dict[Hashable, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for s, key in zip(steps, group_keys(steps)):
        games[key][s.game_idx].append(s.reward)
    spreads, flat = [], 0
    for by_game in games.values():
        values = [math.fsum(rewards) / len(rewards) for rewards in by_game.values()]
        if len(values) < 2:
            continue
        mean = math.fsum(values) / len(values)
        if all(math.isclose(v, mean, rel_tol=1e-12, abs_tol=1e-12) for v in values):
            flat += 1
            spreads.append(0.0)
        else:
            spreads.append(math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values)))
    if not spreads:
        return {}
    return {"group_reward_std_mean": math.fsum(spreads) / len(spreads), "group_zero_std_frac": flat / len(spreads)}
