"""Rerun a headline figure and say whether it falls within its documented range.

    python bench/reproduce.py                     # the list of figures, with their documented values
    python bench/reproduce.py NAME [--quick]      # rerun one; --quick: its short variant, where one exists

Each figure names the command that measures it, the value the docs give, the range the
documented runs spanned (seeds and builds: ``measured_on``) and the page that gives it. The rerun
prints a table (figure, documented, range, measured, within) and the last line

    summary: figure=NAME measured=X documented=Y range=[LO, HI] within=yes|no

Exit status 0 when the measured value falls within the range, 1 when it does not. The tiny models
of the examples ship built (``unstable_hf/shipped.py``), so a rerun starts from the model the docs
measured; what training does from there is float arithmetic, and another CPU rounds it otherwise,
so a trained figure's range is what seeds and builds gave, not a tolerance around one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KUHN_TINY = "tiny:KuhnPoker-v0-train?sft_steps=150"
OPENSPIEL_KUHN_TINY = "tiny:openspiel/kuhn_poker?sft_agent=cfr&sft_backend=openspiel&sft_targets=policy&sft_mix=0.2&sft_steps=3000"
POPULATION = ['model_sampler={name="psro", payoff="exact", phase=10, output="least"}', "training.learning_steps=1850",
              "training.eval_every=50", "learner.lr=1e-4", "collection.eval_policy_metrics=true",
              'collection.eval_mixtures=["uniform", "meta"]', "collection.eval_games=200"]


@dataclass(frozen=True)
class Figure:
    what: str
    documented: float
    low: float
    high: float
    measured_on: str
    page: str
    command: str
    measure: Callable[[bool], float]
    quick: str = ""  #: what --quick changes, or "" where there is no quick variant


def unstable(*args: str) -> None:
    cmd = [sys.executable, "-c", "from unstable_core.cli import main; main()", *args]
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-2000:]}")


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def warm_start_exploitability(quick: bool) -> float:
    cmd = [sys.executable, "-c", "from unstable_core.cli import main; main()", "exploitability", OPENSPIEL_KUHN_TINY,
           "--env", "openspiel/kuhn_poker", "--json"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout)["exploitability"])


def main_job_win_rate(first: bool) -> Callable[[bool], float]:
    """The main job's win rate against random-valid: its first evaluation (before training) or its last."""

    def measure(quick: bool) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            sets = ["--set", "training.learning_steps=1"] if quick else []
            unstable("run", "examples/kuhn-tiny.toml", "--run-dir", str(run_dir), *sets)
            evals = [r for r in records(run_dir) if r["type"] == "eval" and r["opponent"] == "random-valid"]
            return float(evals[0 if first else -1]["win_rate"])

    return measure


def population_least(quick: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        unstable("run", "examples/openspiel-kuhn-tiny.toml", "--run-dir", str(run_dir), "--set", "seed=0",
                 *[a for s in POPULATION for a in ("--set", s)])
        last = [r for r in records(run_dir) if r["type"] == "eval" and "meta" in r.get("mixtures", {})][-1]
        return float(last["mixtures"]["meta"]["exploitability"])


def shipped_builds_rebuilt(quick: bool) -> float:
    """The share of the shipped builds (only the main job's with --quick) that this machine rebuilds
    bit for bit."""
    from unstable_hf.shipped import manifest, mismatched

    builds = [b for b in manifest().values() if not quick or b.spec == KUHN_TINY]
    same = 0
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "UNSTABLE_CACHE": tmp, "UNSTABLE_TINY_BUILD": "local", "OMP_NUM_THREADS": "1"}
        for build in builds:
            started = time.monotonic()
            subprocess.run([sys.executable, "-c", "import sys; from unstable_hf.loading import resolve_model_path; "
                            "print(resolve_model_path(sys.argv[1]))", build.spec], env=env, cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            differ = mismatched(Path(tmp) / f"tiny-{build.key}-local", build.files)
            same += not differ
            print(f"  {build.spec}: {'the same' if not differ else 'differs: ' + ', '.join(differ)} "
                  f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return same / len(builds)


FIGURES = {
    "kuhn-warm-start": Figure(
        "exploitability of examples/openspiel-kuhn-tiny.toml's warm start", 0.3737, 0.3737 - 1e-4, 0.3737 + 1e-4,
        "the shipped build (any machine: the model is shipped, the measure exact)", "README.md, docs/openspiel.md",
        f"unstable exploitability '{OPENSPIEL_KUHN_TINY}' --env openspiel/kuhn_poker", warm_start_exploitability),
    "main-job-base": Figure(
        "the main job's win rate against random-valid before training (1,000 games), seed 0", 0.590, 0.590, 0.590,
        "the shipped build: the same model and deals everywhere", "README.md", "unstable run examples/kuhn-tiny.toml",
        main_job_win_rate(first=True), quick="1 update instead of 80 (the figure is measured before the first)"),
    "main-job": Figure(
        "the main job's win rate against random-valid after 80 updates (1,000 games), seed 0", 0.733, 0.694, 0.733,
        "seeds 0-2 on the shipped build", "README.md", "unstable run examples/kuhn-tiny.toml",
        main_job_win_rate(first=False)),
    "kuhn-population": Figure(
        "psro's least exploitable mixture of its members after 1,850 updates (about 212,000 games), seed 0",
        0.0479, 0.0383, 0.0623, "seeds 0-2 on the shipped build (0.0383-0.0479) and seed 0 on another machine's "
        "build (0.0623)", "docs/samplers.md",
        "unstable run examples/openspiel-kuhn-tiny.toml --set seed=0 " + " ".join(f"--set '{s}'" for s in POPULATION),
        population_least),
    "tiny-builds": Figure(
        "the share of the shipped tiny builds that this machine rebuilds bit for bit", 1.0, 0.0, 1.0,
        "x86-64 with AVX-512, torch 2.13.0 (where they were built: 1.0)", "docs/reproducing.md",
        "UNSTABLE_TINY_BUILD=local (a fresh UNSTABLE_CACHE)", shipped_builds_rebuilt, quick="the main job's model only"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", choices=sorted(FIGURES), help="the figure to rerun (none: list them)")
    parser.add_argument("--quick", action="store_true", help="its short variant, where it has one")
    args = parser.parse_args()
    if args.name is None:
        for name, f in FIGURES.items():
            print(f"{name:16} {f.documented:<8g} [{f.low:g}, {f.high:g}]  {f.what}\n{'':16} measured on {f.measured_on}; "
                  f"{f.page}\n{'':16} {f.command}" + (f"\n{'':16} --quick: {f.quick}" if f.quick else ""))
        return
    figure = FIGURES[args.name]
    if args.quick and not figure.quick:
        sys.exit(f"{args.name} has no quick variant")
    started = time.monotonic()
    measured = figure.measure(args.quick)
    within = figure.low - 1e-12 <= measured <= figure.high + 1e-12
    print(f"| figure | documented | range ({figure.measured_on}) | measured | within |\n|---|---|---|---|---|\n"
          f"| {args.name} | {figure.documented:g} | [{figure.low:g}, {figure.high:g}] | {measured:.4f} | "
          f"{'yes' if within else 'no'} |")
    print(f"({figure.what}; {time.monotonic() - started:.0f} s)", file=sys.stderr)
    print(f"summary: figure={args.name} measured={measured:.4f} documented={figure.documented:g} "
          f"range=[{figure.low:g}, {figure.high:g}] within={'yes' if within else 'no'}")
    sys.exit(0 if within else 1)


if __name__ == "__main__":
    main()
