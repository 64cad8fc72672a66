"""Forward tokens per update with grouped games (`collection.group_size`) against ungrouped ones.

    python bench/group_tokens.py [--steps 20] [--out runs/bench-group-tokens]
    python bench/group_tokens.py --report RUN_DIR [RUN_DIR ...]     # finished runs

Runs the main job (examples/kuhn-tiny.toml, group size 1) and its GRPO version
(examples/kuhn-tiny-grpo.toml, group size 8) for ``--steps`` updates each, evaluations off, then
prints, per run, from its `train` records: the steps an update trained on, the tokens of those
steps (prompt + completion, what a padded learner forwards), the tokens the prefix-shared learner
forwarded, forward tokens per trained step and the share prefix sharing saved. The last line:

    summary: forward_per_step_g1=A forward_per_step_g8=B ratio=B/A prefix_share_g1=C prefix_share_g8=D

The games of a group share their first prompt (the same deal and seat), so a batch of groups
shares more prefixes than a batch of unrelated deals.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CONFIGS = [Path("examples/kuhn-tiny.toml"), Path("examples/kuhn-tiny-grpo.toml")]


def run(config: Path, run_dir: Path, steps: int) -> None:
    sets = [f"training.learning_steps={steps}", "training.eval_every=0", "collection.eval_games=0"]
    cmd = [sys.executable, "-c", "from unstable_core.cli import main; main()", "run", str(config), "--run-dir", str(run_dir),
           *[a for s in sets for a in ("--set", s)]]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{config}: exit {done.returncode}\n{done.stderr[-2000:]}")


def row(run_dir: Path) -> dict:
    config = json.loads((run_dir / "config.json").read_text())["config"]
    trains = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"type":"train"' in line]
    if not trains:
        sys.exit(f"{run_dir}: no train records")
    steps = sum(r["batch_steps"] for r in trains)
    forward = sum(r["forward_tokens"] for r in trains)
    # prefix_share = 1 - forward / sequence tokens, per update: the sequence tokens back out of it
    sequence = sum(r["forward_tokens"] / (1.0 - r["prefix_share"]) for r in trains if r["prefix_share"] < 1.0)
    return {"run": run_dir.name, "group_size": config.get("collection", {}).get("group_size", 1), "updates": len(trains),
            "steps": steps / len(trains), "sequence": sequence / len(trains), "forward": forward / len(trains),
            "per_step": forward / steps, "share": 1.0 - forward / sequence,
            "median_forward": statistics.median(r["forward_tokens"] for r in trains)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20, help="learner updates a run")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-group-tokens"))
    parser.add_argument("--report", type=Path, nargs="+", help="only report these finished runs")
    args = parser.parse_args()
    run_dirs = args.report or [args.out / c.stem for c in CONFIGS]
    if not args.report:
        for config, run_dir in zip(CONFIGS, run_dirs):
            run(config, run_dir, args.steps)
    rows = [row(d) for d in run_dirs]
    print(f"{'run':<26} {'G':>3} {'updates':>7} {'steps':>6} {'tokens':>8} {'forward':>8} {'fwd/step':>8} {'shared':>7}")
    for r in rows:
        print(f"{r['run']:<26} {r['group_size']:>3} {r['updates']:>7} {r['steps']:>6.1f} {r['sequence']:>8.0f} "
              f"{r['forward']:>8.0f} {r['per_step']:>8.1f} {r['share']:>7.3f}")
    by_g = {}
    for r in rows:
        by_g.setdefault(r["group_size"], []).append(r)
    if 1 in by_g and len(by_g) > 1:
        g = max(by_g)
        one = statistics.fmean(r["per_step"] for r in by_g[1])
        many = statistics.fmean(r["per_step"] for r in by_g[g])
        print(f"summary: forward_per_step_g1={one:.1f} forward_per_step_g{g}={many:.1f} ratio={many / one:.3f} "
              f"prefix_share_g1={statistics.fmean(r['share'] for r in by_g[1]):.3f} "
              f"prefix_share_g{g}={statistics.fmean(r['share'] for r in by_g[g]):.3f}")


if __name__ == "__main__":
    main()
