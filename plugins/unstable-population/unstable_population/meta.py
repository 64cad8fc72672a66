"""The meta-game of a population: the empirical payoff matrix from the league's pair results,
and its Nash mixture as a linear program (scipy's HiGHS), not a hand-rolled regret loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def payoff_matrix(uids: Sequence[str], registry: Any) -> list[list[float]]:
    """Row uid's mean result against column uid (+1 a win, -1 a loss, 0 a draw) over the games
    the two played; 0 where they played none (and on the diagonal)."""
    out = []
    for a in uids:
        row = []
        for b in uids:
            wins, draws, losses = registry.head_to_head(a, b) if a != b else (0, 0, 0)
            games = wins + draws + losses
            row.append((wins - losses) / games if games else 0.0)
        out.append(row)
    return out


def nash_mixture(matrix: Sequence[Sequence[float]]) -> list[float]:
    """The row player's maximin mixture of the zero-sum game ``matrix`` (row's payoffs):
    maximise v subject to sum_i x_i A[i][j] >= v for every column j, x a distribution."""
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
    bounds = [(0, None)] * n + [(None, None)]
    solved = linprog(c, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if not solved.success:  # pragma: no cover - a bounded feasible LP always solves
        raise ValueError(f"meta-game LP failed: {solved.message}")
    x = np.clip(solved.x[:n], 0.0, None)
    return [float(p) for p in x / x.sum()]
