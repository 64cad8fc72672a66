"""The meta-game of a population: the empirical payoff matrix from the league's pair results,
and its Nash mixture as a linear program (scipy's HiGHS), not a hand-rolled regret loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def payoff_matrix(uids: Sequence[str], registry: Any, payoff: str = "reward") -> list[list[float]]:
    """Row uid's payoff against column uid over the games the two played: its mean reward
    (``payoff="reward"``: the game's own score, chips in poker) or its mean result (``"outcome"``:
    +1 a win, -1 a loss, 0 a draw) or its exact expected reward (``"exact"``, when the run
    computed it); 0 where they played none (and on the diagonal). ``psro`` solves it only over
    members whose pairs have all been played (or computed): a 0 here is never an unknown pair."""
    return [[pair_payoff(a, b, registry, payoff) if a != b else 0.0 for b in uids] for a in uids]


def pair_payoff(a: str, b: str, registry: Any, payoff: str) -> float:
    if payoff in ("reward", "exact"):
        mean = registry.exact_payoff(a, b) if payoff == "exact" else registry.mean_reward(a, b)
        return 0.0 if mean is None else float(mean)
    wins, draws, losses = registry.head_to_head(a, b)
    games = wins + draws + losses
    return (wins - losses) / games if games else 0.0


def nash_mixture(matrix: Sequence[Sequence[float]], floor: float = 0.0) -> list[float]:
    """The row player's maximin mixture of the zero-sum game ``matrix`` (row's payoffs):
    maximise v subject to sum_i x_i A[i][j] >= v for every column j, x a distribution.
    With ``floor`` > 0 every x_i is at least floor / n (n rows): the best mixture under that
    floor, the same projection as the gamma of projected replicator dynamics (Lanctot et al.
    2017); ``floor=1`` is the uniform mixture."""
    import numpy as np
    from scipy.optimize import linprog

    a = np.asarray(matrix, dtype=float)
    n, m = a.shape
    # variables: x_1..x_n, v; minimise -v
    c = np.zeros(n + 1)
    c[-1] = -1.0
    a_ub = np.hstack([-a.T, np.ones((m, 1))])  # v - sum_i x_i A[i][j] <= 0
    b_ub = np.zeros(m)
    a_eq = np.hstack([np.ones((1, n)), np.zeros((1, 1))])
    bounds = [(floor / n, None)] * n + [(None, None)]
    solved = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if not solved.success:  # pragma: no cover - a bounded feasible LP always solves
        raise ValueError(f"meta-game LP failed: {solved.message}")
    x = np.clip(solved.x[:n], 0.0, None)
    return [float(p) for p in x / x.sum()]
