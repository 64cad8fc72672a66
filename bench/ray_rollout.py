"""Scripted games/s of the `local` executor and of `ray` with 1 and 2 rollout replicas, one run.

    python bench/ray_rollout.py [--games 6000] [--in-flight 256] [--repeat 3]

Each run is a tournament between scripted agents (`random-valid`, `first-valid`, `greedy`) on
TicTacToe and KuhnPoker through the public API, with the same config for every executor but
`[executor]`: the league, buffer and driver in one place, games played by the rollout role(s).
Throughput is taken between the run's first and last summary records, so actor start-up
(seconds under Ray) is not counted. One local Ray cluster (`num_cpus` = the machine's cores, the
settings the executor gives a local cluster it starts) serves the whole bench. Rollout replicas
reserve 0.5 CPU each so two fit on 2 cores.
The league and buffer are built in the driver's process (the executor's default `in_driver`), so
each result crosses one process boundary; the last row makes them actors too (`in_driver = []`),
and each result crosses three. Target on a 2-core machine: ray with 2 replicas >= 1.3 x local.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import unstable_core

TARGET = 1.3


def config(games: int, in_flight: int, executor: dict) -> dict:
    return {
        "name": "bench-ray", "seed": 0,
        "train_envs": [{"env_id": "TicTacToe-v0-train"}, {"env_id": "KuhnPoker-v0-train"}],
        "opponents": ["random-valid", "first-valid", "greedy"],
        "model_sampler": {"name": "fixed"},
        "collection": {"tournament_games": games, "num_train_games": in_flight, "transcripts": 0.0},
        "executor": executor,
    }


def games_per_s(games: int, in_flight: int, executor: dict) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        result = unstable_core.run(config(games, in_flight, executor), run_dir=run_dir)
        assert result.status == "completed" and result.games_played == games, result
        summaries = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["type"] == "summary"]
        first, last = summaries[0], summaries[-1]
        return (last["games"] - first["games"]) / max(last["time"] - first["time"], 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=6000)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from unstable_ray.environment import prepare_local_cluster

    prepare_local_cluster()  # the settings the executor gives a local cluster it starts
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    setups = {
        "local": {"name": "local"},
        "ray, 1 replica": {"name": "ray", "rollout_replicas": 1, "rollout": {"num_cpus": 0.5}},
        "ray, 2 replicas": {"name": "ray", "rollout_replicas": 2, "rollout": {"num_cpus": 0.5}},
        "ray, 2, all actors": {"name": "ray", "rollout_replicas": 2, "rollout": {"num_cpus": 0.5}, "in_driver": []},
    }
    best = {name: 0.0 for name in setups}
    for _ in range(args.repeat):  # interleaved: machine noise hits every setup alike
        for name, executor in setups.items():
            best[name] = max(best[name], games_per_s(args.games, args.in_flight, executor))
    ray.shutdown()
    print(f"{'executor':<18}{'games/s':>10}{'x local':>10}")
    print("-" * 38)
    for name, rate in best.items():
        print(f"{name:<18}{rate:>10.0f}{rate / best['local']:>10.2f}")
    r1, r2 = best["ray, 1 replica"] / best["local"], best["ray, 2 replicas"] / best["local"]
    r2a = best["ray, 2, all actors"] / best["local"]
    print(f"\nsummary: ray1_over_local={r1:.2f} ray2_over_local={r2:.2f} ray2_all_actors_over_local={r2a:.2f} target={TARGET} "
          f"{'MET' if r2 >= TARGET else 'MISSED'} (cores={os.cpu_count()}, games={args.games}, in_flight={args.in_flight})")


if __name__ == "__main__":
    main()
