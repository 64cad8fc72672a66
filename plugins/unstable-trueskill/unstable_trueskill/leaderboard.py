"""Leaderboard and heatmap from a run directory's registry snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unstable_core import UnstableError, save_figure

from .plugin import DEFAULT_SIGMA


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
    """Models sorted by mu - 3 sigma (conservative skill), best first. A model without a TrueSkill
    rating (no game yet, or a run rated by another rater) has ``mu``, ``sigma`` and ``conservative``
    None, never the prior, and comes after the rated ones, ordered by its rater's ``score`` (the
    ``wins`` rater's), then by games; the rater's other figures are kept (``score``)."""
    rows = []
    for m in snapshot.get("models", []):
        r = m.get("rating", {})
        rated = "mu" in r
        mu, sigma = (float(r["mu"]), float(r.get("sigma", DEFAULT_SIGMA))) if rated else (None, None)
        row: dict[str, Any] = {
            "uid": m["uid"], "kind": m.get("kind"), "mu": mu, "sigma": sigma,
            "conservative": mu - 3 * sigma if mu is not None and sigma is not None else None,
            "games": m.get("games", 0), "wins": m.get("wins", 0), "draws": m.get("draws", 0), "losses": m.get("losses", 0),
        }
        if isinstance(r.get("score"), (int, float)):
            row["score"] = float(r["score"])
        rows.append(row)

    def order(x: dict[str, Any]) -> tuple[int, float, int]:
        if x["conservative"] is not None:
            return (0, -x["conservative"], 0)
        return (1, -x.get("score", float("-inf")), -x["games"])

    return sorted(rows, key=order)


def unrated_note(run_dir: str, rows: list[dict[str, Any]]) -> str | None:
    """What to tell when no model holds a TrueSkill rating: the run's rater, from its config.json."""
    if not rows or any(r["mu"] is not None for r in rows):
        return None
    rater = None
    try:
        rater = ((json.loads((Path(run_dir) / "config.json").read_text()).get("config") or {}).get("rater") or {}).get("name")
    except (OSError, ValueError, AttributeError):
        pass
    if rater == "trueskill":
        return f"{run_dir}: no model rated yet (no game finished): rows show game counts only"
    by = f"the run's rater is {rater!r}" if rater else "the run's rater wrote no mu or sigma"
    return f"{run_dir}: no TrueSkill ratings ({by}): rows show game counts and its score, where it has one"


def print_table(rows: list[dict[str, Any]]) -> None:
    """The leaderboard. Model names and figures are never cut: where the table is wider than the
    console, the columns losses, draws, wins, sigma and mu are left out, in that order, and said so;
    where even that is too wide, each model is one line of text."""
    from rich.console import Console
    from rich.table import Table

    rated = any(r["mu"] is not None for r in rows)
    scored = any("score" in r for r in rows)

    def fig(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    columns: dict[str, list[str]] = {"#": [str(i) for i in range(1, len(rows) + 1)], "uid": [r["uid"] for r in rows]}
    if rated:
        columns |= {"mu": [fig(r["mu"]) for r in rows], "sigma": [fig(r["sigma"]) for r in rows],
                    "mu - 3 sigma": [fig(r["conservative"]) for r in rows]}
    if scored:
        columns["score"] = [fig(r.get("score")) for r in rows]
    for key in ("games", "wins", "draws", "losses"):
        columns[key] = [str(r[key]) for r in rows]
    console = Console()

    def width() -> int:  # a rich table with a box: "│ " before each column, " │" after the last
        return sum(max(len(c), *map(len, cells), 0) + 3 for c, cells in columns.items()) + 1

    full, dropped = dict(columns), []
    for key in ("losses", "draws", "wins", "sigma", "mu"):
        if width() <= console.width:
            break
        if key in columns:
            del columns[key]
            dropped.append(key)
    title = "leaderboard (sorted by mu - 3 sigma)" if rated else "models (no TrueSkill ratings)"
    if width() > console.width:  # a name too long for any table: lines, which a terminal wraps whole
        print(title)
        for i in range(len(rows)):
            print("  ".join(cells[i] if c in ("#", "uid") else f"{c} {cells[i]}" for c, cells in full.items()))
        dropped = []
    else:
        t = Table(title=title)
        for col in columns:
            t.add_column(col, justify="left" if col == "uid" else "right", no_wrap=True)
        for i in range(len(rows)):
            t.add_row(*(cells[i] for cells in columns.values()))
        console.print(t)
    if dropped:
        console.print(f"{', '.join(reversed(dropped))} left out at {console.width} columns: --json has every figure")


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
