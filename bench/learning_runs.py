"""Compare finished training runs: win rate against the first fixed opponent at each evaluation,
invalid-move rate, gradient-norm variance, wall time.

    python bench/learning_runs.py RUN_DIR [RUN_DIR ...] [--bar 0.15] [--minutes 10]

Runs are grouped by learner name (from each run's config.json). "gain" is the best evaluated win
rate minus the one before training; "gain <= N min" counts only evaluations written within
``--minutes`` of the run's start. The summary line gives, per learner, the mean gain and how many
runs cleared ``--bar`` within the time limit.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def load(run_dir: Path) -> dict:
    config = json.loads((run_dir / "config.json").read_text())["config"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    opponent = (config.get("opponents") or [None])[0]
    opponent = opponent if isinstance(opponent, str) or opponent is None else opponent.get("uid")
    evals = [r for r in records if r["type"] == "eval" and (opponent is None or r["opponent"] == opponent)]
    trains = [r for r in records if r["type"] == "train"]
    norms = [r["grad_norm"] for r in trains if "grad_norm" in r]
    return {
        "run": run_dir.name,
        "learner": config["learner"]["name"],
        "seed": config.get("seed", 0),
        "evals": [(r["step"], r["win_rate"], r["invalid_rate"], r["time"]) for r in evals],
        "grad_norm_var": statistics.pvariance(norms) if len(norms) > 1 else float("nan"),
        "updates": len(trains),
        "wall_s": max((r["time"] for r in records), default=0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--bar", type=float, default=0.15, help="win-rate gain to clear")
    parser.add_argument("--minutes", type=float, default=10.0, help="time limit for the gain")
    args = parser.parse_args()
    rows = [load(p) for p in args.runs]
    print(f"{'run':<16} {'learner':<10} {'seed':>4} {'upd':>4} {'wall':>7}  {'gvar':>9}  win rate by step (invalid %)  gain  gain<={args.minutes:g}min")
    by_learner: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        start = r["evals"][0][1] if r["evals"] else float("nan")
        gain = max(w for _s, w, _i, _t in r["evals"]) - start if r["evals"] else float("nan")
        timely = [w for _s, w, _i, t in r["evals"] if t <= args.minutes * 60]
        gain_in_time = max(timely) - start if timely else float("nan")
        by_learner[r["learner"]].append((gain, gain_in_time))
        curve = " ".join(f"{s}:{w:.3f}({100 * i:.1f})" for s, w, i, _t in r["evals"])
        print(f"{r['run']:<16} {r['learner']:<10} {r['seed']:>4} {r['updates']:>4} {r['wall_s'] / 60:>6.1f}m  "
              f"{r['grad_norm_var']:>9.2e}  {curve}  {gain:+.3f}  {gain_in_time:+.3f}")
    parts = []
    for learner, gains in sorted(by_learner.items()):
        mean = statistics.fmean(g for g, _ in gains)
        cleared = sum(1 for _, g in gains if g >= args.bar)
        parts.append(f"{learner}: mean gain {mean:+.3f}, {cleared}/{len(gains)} runs +{args.bar:g} within {args.minutes:g} min")
    print("summary: " + "; ".join(parts))


if __name__ == "__main__":
    main()
