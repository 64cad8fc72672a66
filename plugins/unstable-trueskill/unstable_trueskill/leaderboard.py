"""Leaderboard and heatmap from a run directory's registry snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unstable_core import UnstableError, save_figure

from .plugin import DEFAULT_MU, DEFAULT_SIGMA


def load_snapshot(run_dir: str) -> dict[str, Any]:
    path = Path(run_dir) / "registry.json"
    if not path.is_file():
        raise UnstableError(f"{run_dir}: no registry.json (is this a run directory?)")
    try:
        snapshot = json.loads(path.read_text())
    except ValueError as exc:
        raise UnstableError(f"{path}: not valid JSON: {exc}") from None
    problem = malformed(snapshot)
    if problem:
        raise UnstableError(f"{path}: not a registry snapshot ({problem})")
    return snapshot


def malformed(snapshot: Any) -> str | None:
    """What is wrong with a registry snapshot's shape, or None."""
    if not isinstance(snapshot, dict):
        return f"a JSON {type(snapshot).__name__}, not an object"
    models, pairs = snapshot.get("models", []), snapshot.get("pairs", [])
    if not isinstance(models, list) or not all(isinstance(m, dict) and isinstance(m.get("uid"), str) for m in models):
        return "'models' must be a list of objects with a string 'uid'"
    number = (int, float)
    for m in models:
        rating = m.get("rating", {})
        if not isinstance(rating, dict) or not all(isinstance(rating.get(k, 0.0), number) for k in ("mu", "sigma")):
            return f"model {m['uid']!r}: 'rating' must be an object with numbers 'mu' and 'sigma'"
        if not all(isinstance(m.get(k, 0), int) for k in ("games", "wins", "draws", "losses")):
            return f"model {m['uid']!r}: 'games', 'wins', 'draws' and 'losses' must be integers"
    if not isinstance(pairs, list) or not all(isinstance(p, dict) and isinstance(p.get("games"), int) for p in pairs):
        return "'pairs' must be a list of objects with an integer 'games'"
    return None


def leaderboard(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """Models sorted by mu - 3 sigma (conservative skill), best first."""
    rows = []
    for m in snapshot.get("models", []):
        r = m.get("rating", {})
        mu, sigma = float(r.get("mu", DEFAULT_MU)), float(r.get("sigma", DEFAULT_SIGMA))
        rows.append({
            "uid": m["uid"], "kind": m.get("kind"), "mu": mu, "sigma": sigma, "conservative": mu - 3 * sigma,
            "games": m.get("games", 0), "wins": m.get("wins", 0), "draws": m.get("draws", 0), "losses": m.get("losses", 0),
        })
    return sorted(rows, key=lambda x: x["conservative"], reverse=True)


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="leaderboard (sorted by mu - 3 sigma)")
    for col in ("#", "uid", "mu", "sigma", "mu - 3 sigma", "games", "wins", "draws", "losses"):
        t.add_column(col, justify="left" if col == "uid" else "right")
    for i, r in enumerate(rows, 1):
        t.add_row(str(i), r["uid"], f"{r['mu']:.2f}", f"{r['sigma']:.2f}", f"{r['conservative']:.2f}",
                  str(r["games"]), str(r["wins"]), str(r["draws"]), str(r["losses"]))
    Console().print(t)


def match_matrix(snapshot: dict[str, Any]) -> tuple[list[str], list[list[int]]]:
    uids = [m["uid"] for m in snapshot.get("models", [])]
    index = {u: i for i, u in enumerate(uids)}
    counts = [[0] * len(uids) for _ in uids]
    for p in snapshot.get("pairs", []):
        a, b = index.get(p["a"]), index.get(p["b"])
        if a is not None and b is not None:
            counts[a][b] = counts[b][a] = int(p["games"])
    return uids, counts


def draw_heatmap(snapshot: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    uids, counts = match_matrix(snapshot)
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(uids), 1 + 0.5 * len(uids)))
    im = ax.imshow(counts, cmap="viridis")
    ax.set_xticks(range(len(uids)), uids, rotation=45, ha="right")
    ax.set_yticks(range(len(uids)), uids)
    for i in range(len(uids)):
        for j in range(len(uids)):
            ax.text(j, i, str(counts[i][j]), ha="center", va="center", color="w" if counts[i][j] < max(map(max, counts or [[0]])) / 2 else "k", fontsize=8)
    fig.colorbar(im, ax=ax, label="games")
    ax.set_title("matches played")
    fig.tight_layout()
    save_figure(fig, path)
