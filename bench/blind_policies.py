"""The least exploitable policy of Kuhn poker that cannot tell some information states apart:
what a model that reads only part of its observation can reach at best.

    python bench/blind_policies.py [--restarts 12]

A policy that gives the same probabilities to a group of information states (a model blind to
what tells them apart) has one parameter a group, the probability of [bet], and the figure is
the least exploitability (by OpenSpiel) that local search from ``--restarts`` random starts
finds. Rows: every state free (a Nash equilibrium, 0), player 1 unable to tell the opponent's
bet from a pass (``cb`` = ``cp`` for each card c: both are player 1's only decision, so the tie
is linear in the sequence form, where exploitability is convex, and the search finds the
optimum), and a policy that reads only its card (a tie across player 0's two decisions, not
linear: the best of the searches). Two minutes on one core.
"""

from __future__ import annotations

import argparse

import numpy as np

KEYS = ["0", "0b", "0p", "0pb", "1", "1b", "1p", "1pb", "2", "2b", "2p", "2pb"]  # card J/Q/K, then the betting
TIES = {
    "every information state apart": [[k] for k in KEYS],
    "player 1 cannot tell a bet from a pass": [[c] for c in "012"] + [[c + "b", c + "p"] for c in "012"] + [[c + "pb"] for c in "012"],
    "only the card read": [[k for k in KEYS if k[0] == c] for c in "012"],
}


def least_exploitable(groups: list[list[str]], restarts: int, seed: int = 0) -> tuple[float, list[float]]:
    import pyspiel
    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms import exploitability
    from scipy.optimize import minimize

    game = pyspiel.load_game("kuhn_poker")
    table = policy_lib.TabularPolicy(game)

    def value(x: np.ndarray) -> float:
        for group, bet in zip(groups, np.clip(x, 0.0, 1.0), strict=True):
            for key in group:
                table.policy_for_key(key)[:] = [1.0 - bet, bet]  # actions: 0 pass, 1 bet
        return float(exploitability.exploitability(game, table))

    rng = np.random.default_rng(seed)
    best: tuple[float, list[float]] = (float("inf"), [])
    for _ in range(restarts):
        found = minimize(value, rng.random(len(groups)), method="Powell", options={"xtol": 1e-6, "ftol": 1e-9})
        found = minimize(value, np.clip(found.x, 0, 1), method="Nelder-Mead",
                         options={"xatol": 1e-7, "fatol": 1e-10, "maxfev": 20_000})
        if found.fun < best[0]:
            best = (float(found.fun), [float(p) for p in np.clip(found.x, 0, 1)])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    parser.add_argument("--restarts", type=int, default=12, help="random starts of the local search")
    args = parser.parse_args()
    if args.restarts < 1:
        parser.error("--restarts must be at least 1")
    print(f"{'policy':42s} {'least exploitability':>20s}  P([bet]) by group")
    floors = {}
    for name, groups in TIES.items():
        value, bets = least_exploitable(groups, args.restarts)
        floors[name] = value
        shown = "  ".join(f"{'='.join(g) if len(g) < 4 else g[0][0] + '*'}:{b:.3f}" for g, b in zip(groups, bets, strict=True))
        print(f"{name:42s} {value:20.4f}  {shown}")
    blind, card = floors["player 1 cannot tell a bet from a pass"], floors["only the card read"]
    print(f"summary: game=kuhn_poker free={floors['every information state apart']:.4f} bet_pass_blind={blind:.4f} "
          f"card_only={card:.4f}")


if __name__ == "__main__":
    main()
