"""The main job's learning, seed after seed: does every seed clear the bar?

    python bench/learning.py [--seeds 3] [--config examples/kuhn-tiny.toml] [--set KEY=VALUE ...]
    python bench/learning.py --report RUN_DIR [RUN_DIR ...]     # the table of finished runs

Runs ``unstable run CONFIG --set seed=N`` for each seed, one after another in a fresh process
(the tiny model is built first, once, so that no run's wall time includes it), then prints a table
(seed, first and final win rate against the config's first fixed opponent, the share of the gap
to the ceiling closed, first and final invalid-move rate, wall time) and the last line

    summary: min_gain=X mean_gain=Y min_gap_closed=G max_final_invalid=Z max_wall_s=W bar=B cleared=K/N

The bar (issue "Learning that convinces"): a rise of at least 20 points from the first evaluation
or 60 % of the gap to the ceiling, whichever is smaller; the final invalid-move rate at most 1 %
and not above the first evaluation's; within 10 minutes. The ceiling is best-response against
random-valid (examples/ceiling.toml: 0.771 on KuhnPoker-v0-train).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from learning_runs import load

CEILINGS = {"KuhnPoker-v0-train": 0.771, "TicTacToe-v0-train": 0.784}


def build_model(config: Path, overrides: list[str]) -> None:
    """Build (or find cached) the config's tiny model, so that no run pays for it."""
    from unstable_core.config import load_config

    model = load_config(str(config), overrides).model
    if model is not None and model.model.startswith("tiny"):
        from unstable_hf.loading import resolve_model_path

        resolve_model_path(model.model)


def run(config: Path, run_dir: Path, seed: int, overrides: list[str]) -> None:
    sets = [a for o in [f"seed={seed}", *overrides] for a in ("--set", o)]
    cmd = [sys.executable, "-c", "from unstable_core.cli import main; main()", "run", str(config), "--run-dir", str(run_dir), *sets]
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"seed {seed}: exit {done.returncode}\n{done.stderr[-2000:]}")
    print(f"  seed {seed}: {time.monotonic() - started:.0f} s -> {run_dir}", file=sys.stderr)


def row(run_dir: Path, ceiling: float | None) -> dict:
    r = load(run_dir)
    if len(r["evals"]) < 2:
        sys.exit(f"{run_dir}: fewer than two evaluations")
    (_, first, first_invalid, _), (_, final, final_invalid, _) = r["evals"][0], r["evals"][-1]
    gap = (final - first) / (ceiling - first) if ceiling is not None and ceiling > first else float("nan")
    return {"run": run_dir.name, "seed": r["seed"], "first": first, "final": final, "gain": final - first, "gap": gap,
            "first_invalid": first_invalid, "final_invalid": final_invalid, "wall_s": r["wall_s"],
            "bar": min(0.20, 0.6 * (ceiling - first)) if ceiling is not None else 0.20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=Path("examples/kuhn-tiny.toml"))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-learning"), help="where the runs go")
    parser.add_argument("--ceiling", type=float, default=None, help="default: from the config's first train env")
    parser.add_argument("--report", type=Path, nargs="+", help="only report these finished runs")
    args = parser.parse_args()
    if args.report:
        run_dirs = args.report
    else:
        build_model(args.config, args.overrides)
        run_dirs = [args.out / f"{args.config.stem}-seed{s}" for s in range(args.first_seed, args.first_seed + args.seeds)]
        for seed, run_dir in zip(range(args.first_seed, args.first_seed + args.seeds), run_dirs):
            run(args.config, run_dir, seed, args.overrides)
    config = json.loads((run_dirs[0] / "config.json").read_text())["config"]
    env_id = config["train_envs"][0]["env_id"]
    ceiling = args.ceiling if args.ceiling is not None else CEILINGS.get(env_id)
    rows = [row(d, ceiling) for d in run_dirs]
    print(f"{env_id}, ceiling {ceiling}")
    print(f"{'run':<24} {'seed':>4} {'first':>6} {'final':>6} {'gain':>7} {'gap':>6} {'inv0 %':>7} {'inv %':>6} {'wall s':>7}  bar")
    cleared = 0
    for r in rows:
        ok = r["gain"] >= r["bar"] and r["final_invalid"] <= min(0.01, r["first_invalid"]) and r["wall_s"] <= 600
        cleared += ok
        print(f"{r['run']:<24} {r['seed']:>4} {r['first']:>6.3f} {r['final']:>6.3f} {r['gain']:>+7.3f} {r['gap']:>6.2f} "
              f"{100 * r['first_invalid']:>7.2f} {100 * r['final_invalid']:>6.2f} {r['wall_s']:>7.0f}  {'yes' if ok else 'no'}")
    print(f"summary: min_gain={min(r['gain'] for r in rows):+.3f} mean_gain={statistics.fmean(r['gain'] for r in rows):+.3f} "
          f"min_gap_closed={min(r['gap'] for r in rows):.2f} max_final_invalid={max(r['final_invalid'] for r in rows):.4f} "
          f"max_wall_s={max(r['wall_s'] for r in rows):.0f} bar={min(r['bar'] for r in rows):.3f} cleared={cleared}/{len(rows)}")


if __name__ == "__main__":
    main()
