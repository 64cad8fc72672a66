"""Per-turn rewards and generalized advantage estimation over one player's turns (pure Python)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from unstable_core import Step


def turn_rewards(episode: Sequence[Step]) -> list[float]:
    """The reward of each turn of one player's game: its step reward (what step transforms added:
    ``reward - final_reward``) at every turn, and the final reward at the last turn only."""
    return [
        (s.reward - s.final_reward) + (s.final_reward if s.turn_index == s.num_turns - 1 else 0.0)
        for s in episode
    ]


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float, lam: float) -> tuple[list[float], list[float]]:
    """Advantages and returns of one episode (the game ends after its last turn: no value after it).

        delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)
        A_t = delta_t + gamma * lam * A_{t+1}          return_t = A_t + V(s_t)
    """
    advantages = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    return advantages, [a + v for a, v in zip(advantages, values)]


def episodes(steps: Sequence[Step]) -> list[list[int]]:
    """Indices of ``steps`` grouped by (game, player), each in turn order. Every turn of each
    player's game must be there: GAE over part of an episode is wrong."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, s in enumerate(steps):
        groups[(s.game_idx, s.player_id)].append(i)
    out = []
    for (game, player), idx in groups.items():
        idx.sort(key=lambda i: steps[i].turn_index)
        turns = [steps[i].turn_index for i in idx]
        if turns != list(range(steps[idx[0]].num_turns)):
            raise ValueError(
                f"a2c needs every turn of a player's game in one batch; game {game} player {player} has turns "
                f"{turns} of {steps[idx[0]].num_turns} (use [buffer] name = \"episode\")"
            )
        out.append(idx)
    return out
