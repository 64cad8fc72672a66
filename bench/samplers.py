"""Which opponent sampler makes the tiny model's policy least exploitable: seeds x samplers on an
OpenSpiel game, exploitability by OpenSpiel at each evaluation and of the population's mixture.

    python bench/samplers.py [--quick] [--seeds 3] [--steps 80]
                             [--samplers mirror random fictitious psro psro-exact psro-phase psro-least psro-output-least]
                             [--config examples/openspiel-kuhn-tiny.toml] [--set key=value ...] [--out DIR] [--jobs N]
    python bench/samplers.py --from DIR [--floor]     # the table of runs kept with --out

Each run is the config (default: the main job's recipe on openspiel/kuhn_poker) with the sampler
swapped in, `collection.eval_policy_metrics` on and an evaluation every `--steps / 4` updates.
The table gives, per sampler, at each evaluation (mean and min-max over seeds) the exploitability
of the latest checkpoint, of the uniform mixture of the population so far (fictitious play's
output) and, for psro, of its meta mixture (`collection.eval_mixtures`), with the training games
played by then and the wall time. `--quick`: one seed, 20 updates, evaluations of 100 games.
`--jobs N` runs N of them at once, each in its own process (a run of the tiny model keeps about
one core busy: its games' generation is one thread), with OMP_NUM_THREADS=1 unless set.
`--floor` adds, per sampler, the least exploitable mixture of each run's checkpoints at its end
(`unstable exploitability RUN_DIR --mixture least`: a floor for any mixture of the population,
not a sampler's output; two-player zero-sum games, a minute or two a run on Kuhn).
Needs unstable-openspiel, unstable-population, unstable-hf.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import unstable_core

SAMPLERS = {
    "mirror": {"name": "mirror"},
    "random": {"name": "random", "fixed_prob": 0.5, "max_active": 3},
    "fictitious": {"name": "fictitious"},
    "psro": {"name": "psro", "entry_games": 50, "resolve_every": 200},
    "psro-exact": {"name": "psro", "payoff": "exact"},  # the meta-game from exact expected payoffs (OpenSpiel)
    "psro-phase": {"name": "psro", "payoff": "exact", "phase": 10},  # and a member every 10 checkpoints
    # and the members' least exploitable mixture in the whole game instead of the meta-game's Nash (Anytime PSRO)
    "psro-least": {"name": "psro", "payoff": "exact", "phase": 10, "meta_solver": "least"},
    # opponents from the Nash mixture, the population's policy the members' least exploitable mixture
    "psro-output-least": {"name": "psro", "payoff": "exact", "phase": 10, "output": "least"},
}


def run_one(config: str, sampler: str, seed: int, steps: int, games: int, extra: list[str], root: Path) -> dict:
    run_dir = root / f"{sampler}-{seed}"
    table = "{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in SAMPLERS[sampler].items()) + "}"
    overrides = [f"seed={seed}", f"model_sampler={table}",
                 f"training.learning_steps={steps}", f"training.eval_every={max(1, steps // 4)}",
                 "collection.eval_policy_metrics=true", 'collection.eval_mixtures=["uniform", "meta"]',
                 f"collection.eval_games={games}", 'trackers=[{name="jsonl"}]', *extra]
    unstable_core.run(config, run_dir=run_dir, overrides=overrides)
    return read_run(run_dir)


def read_run(run_dir: Path) -> dict:
    """A run's exploitability curves (latest, uniform, meta), training games and wall time (summed over its
    resumed segments), from its metrics.jsonl."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    segments: list[float] = [0.0]  # a resumed run's clock starts again at each resume record
    for r in records:
        if r["type"] == "resume":
            segments.append(0.0)
        segments[-1] = max(segments[-1], r.get("time", 0.0))
    wall = sum(segments)
    env, params = records[0]["config"]["train_envs"][0]["env_id"], records[0]["config"]["train_envs"][0].get("kwargs") or {}
    evals = {r["step"]: r for r in records if r["type"] == "eval" and "exploitability" in r["policy"]}
    trained = {r["step"]: sum(t["games"] for t in r["envs"].get("train", {}).values()) for r in records if r["type"] == "summary"}
    curves = {"latest": {s: r["policy"]["exploitability"] for s, r in evals.items()}}
    for name in ("uniform", "meta"):
        curves[name] = {s: r["mixtures"][name]["exploitability"] for s, r in evals.items() if name in r.get("mixtures", {})}
    games_at = {s: max([g for t, g in trained.items() if t <= s], default=0) for s in evals}
    return {"env": env, "curves": curves, "games": games_at, "wall": wall, "run_dir": run_dir, "params": params}


def least_mixture(run: dict) -> float:
    """The exploitability of the least exploitable mixture of the run's checkpoints (unstable-openspiel)."""
    from unstable_openspiel.exploit import mixture_exploitability

    return mixture_exploitability(str(run["run_dir"]), run["env"], "least", run["params"]).exploitability


def spread(values: list[float]) -> str:
    return f"{statistics.fmean(values):.4f} [{min(values):.4f}-{max(values):.4f}]" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    parser.add_argument("--config", default="examples/openspiel-kuhn-tiny.toml")
    parser.add_argument("--samplers", nargs="+", default=["mirror", "random", "fictitious", "psro"], choices=list(SAMPLERS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--games", type=int, default=200, help="games per evaluation")
    parser.add_argument("--set", dest="extra", action="append", default=[], help="more config overrides")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (SAMPLER-SEED); default: a temporary folder")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process")
    parser.add_argument("--quick", action="store_true", help="one seed, 20 updates, 100-game evaluations")
    parser.add_argument("--floor", action="store_true",
                        help="also the least exploitable mixture of each run's checkpoints at its end (a floor, not an output)")
    parser.add_argument("--from", dest="read", type=Path, default=None,
                        help="run nothing: the table of the runs already in this folder (SAMPLER-SEED, as --out keeps them)")
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs: at least 1 (found {args.jobs})")
    if args.read is not None and not args.read.is_dir():
        parser.error(f"--from: {args.read} is not a folder of kept runs (bench/samplers.py --out DIR)")
    if args.quick:
        args.seeds, args.steps, args.games = 1, 20, 100
    try:
        if args.floor and args.read is None:  # before the runs, not after them
            config = unstable_core.load_config(args.config, args.extra)
            env = (config.train_envs or config.eval_envs)[0]
            from unstable_openspiel.least_exploitable import check_solvable

            check_solvable(env.env_id, env.kwargs or {})  # a two-player zero-sum game small enough for the LP
    except unstable_core.UnstableError as exc:
        parser.exit(2, f"--floor: {exc}\n")
    results: dict[str, list[dict]] = {}
    if args.read is not None:
        for run_dir in sorted(args.read.iterdir()):
            sampler, _, seed = run_dir.name.rpartition("-")
            if sampler in SAMPLERS and seed.isdigit() and (run_dir / "metrics.jsonl").is_file():
                results.setdefault(sampler, []).append(read_run(run_dir))
        if not results:
            parser.error(f"--from: {args.read} holds no kept runs (SAMPLER-SEED folders with metrics.jsonl)")
    else:
        with tempfile.TemporaryDirectory() as scratch:
            root = args.out or Path(scratch)
            plan = [(args.config, sampler, seed, args.steps, args.games, args.extra, root)
                    for sampler in args.samplers for seed in range(args.seeds)]
            if args.jobs > 1:
                os.environ.setdefault("OMP_NUM_THREADS", "1")  # N runs share the cores: one thread each
                with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
                    done = list(pool.map(run_one, *zip(*plan, strict=True)))
            else:
                done = [run_one(*job) for job in plan]
            for (_, sampler, *_), result in zip(plan, done, strict=True):
                results.setdefault(sampler, []).append(result)
    steps = sorted(set.intersection(*(set(r["curves"]["latest"]) for rs in results.values() for r in rs)))
    print(f"{'sampler':<11}{'policy':<9}" + "".join(f"{'update ' + str(s):>28}" for s in steps) + f"{'wall s':>9}")
    final = {}
    for sampler, runs in results.items():
        games = [statistics.fmean(r["games"][s] for r in runs) for s in steps]
        print(f"{sampler:<11}{'games':<9}" + "".join(f"{g:>28,.0f}" for g in games) + f"{statistics.fmean(r['wall'] for r in runs):>9.0f}")
        ends = []
        for name in ("latest", "uniform", "meta"):
            if any(r["curves"][name] for r in runs):  # psro's meta mixture exists once it has solved its meta-game
                cells = [spread([r["curves"][name][s] for r in runs if s in r["curves"][name]]) for s in steps]
                print(f"{'':<11}{name:<9}" + "".join(f"{c:>28}" for c in cells))
                last = [r["curves"][name][steps[-1]] for r in runs if steps[-1] in r["curves"][name]]
                ends += [statistics.fmean(last)] if len(last) == len(runs) else []
        if args.floor:
            try:
                floors = [least_mixture(r) for r in runs]
            except unstable_core.UnstableError as exc:
                parser.exit(2, f"--floor: {exc}\n")
            print(f"{'':<11}{'least':<9}{spread(floors):>28} at the end (a floor: " + " / ".join(f"{f:.4f}" for f in floors) + ")")
        final[sampler] = min(ends)
    best = min(final, key=final.__getitem__)
    mirror = statistics.fmean(r["curves"]["latest"][steps[-1]] for r in results["mirror"]) if "mirror" in results else float("nan")
    game = next(iter(results.values()))[0]["env"]
    counts = {sampler: len(runs) for sampler, runs in results.items()}  # seeds behind each row (--from: as kept)
    others = "".join(f"; {s}: {n} seed{'s' if n != 1 else ''}" for s, n in counts.items() if s != best)
    if counts[best] == 1:
        print(f"best sampler {best} rests on one seed: one run, no range to weigh it against (--seeds 3 gives one){others}")
    else:
        print(f"best sampler {best}: {counts[best]} seeds{others}")
    one = " (one seed: not a ranking)" if counts[best] == 1 else ""
    print(f"summary: game={game} best_sampler={best} best_exploitability={final[best]:.4f} "
          f"mirror_exploitability={mirror:.4f} seeds={counts[best]}{one}")


if __name__ == "__main__":
    main()
