"""Games/s through the framework against a raw TextArena loop, same scripted agents, same process.

    python bench/rollout.py [--games 600] [--repeat 7] [--quick]

"framework" is a real run through the public API with the default collection settings (the
driver over the league, rollout and buffer roles of the local executor, 16 games in flight,
textarena env provider, templates, scripted inference, wins rater, registry, per-env totals,
jsonl metrics, the default 10% sample of transcripts) playing a tournament between
`random-valid` agents. "raw" is `ta.make`, `reset`, `get_observation`, the same agent function,
`step`, `close` in a plain loop. Raw and framework runs alternate, and each side reports its
best of `--repeat` runs (timing noise on a shared machine only ever slows a run down).
Target: framework >= 0.7 x raw. The last column is the framework with every env call on a worker
thread (``collection.env_calls = "threads"``), for what that safety costs on fast envs.
"""

from __future__ import annotations

import random
import tempfile
import time

import textarena as ta
from bench_args import games_parser, parse

import unstable_core
from unstable_core.builtin.inference_scripted import agent_random_valid
from unstable_core.builtin.templates import extract_boxed_action

TARGET = 0.7


def raw_games_per_s(env_id: str, games: int) -> float:
    t = time.perf_counter()
    for g in range(games):
        env = ta.make(env_id)
        env.reset(num_players=2, seed=g)
        env.state.error_allowance = 0
        done, turn = False, 0
        while not done:
            _pid, obs = env.get_observation()
            action, _ = extract_boxed_action(agent_random_valid(obs, random.Random(g * 1000 + turn)))
            done, _ = env.step(action=action)
            turn += 1
        env.close()
    return games / (time.perf_counter() - t)


def framework_games_per_s(env_id: str, games: int, system, env_calls: str = "auto") -> float:
    cfg = {
        "name": "bench", "train_envs": [env_id], "opponents": ["random-valid", {"uid": "rv2", "model": "random-valid"}],
        "model_sampler": {"name": "fixed"},
        "collection": {"tournament_games": games, "num_train_games": 16, "env_calls": env_calls},
        "trackers": [{"name": "jsonl"}],
    }
    with tempfile.TemporaryDirectory() as d:
        job = unstable_core.build(cfg, run_dir=d, plugins=system)  # config checks: not timed
        t = time.perf_counter()
        job.start()
        return games / (time.perf_counter() - t)


def main() -> None:
    args = parse(games_parser(__doc__, games=600, repeat=7, quick=(100, 1)))
    system = unstable_core.load_plugins()
    print(f"{'env':<22} {'raw games/s':>12} {'framework games/s':>18} {'ratio':>7} {'env calls on threads':>21}")
    print("-" * 84)
    ratios = []
    for env_id in ("TicTacToe-v0-train", "KuhnPoker-v0-train"):
        raw = fw = threads = 0.0
        for _ in range(args.repeat):
            raw = max(raw, raw_games_per_s(env_id, args.games))
            fw = max(fw, framework_games_per_s(env_id, args.games, system))
            threads = max(threads, framework_games_per_s(env_id, args.games, system, "threads"))
        ratios.append(fw / raw)
        print(f"{env_id:<22} {raw:>12.1f} {fw:>18.1f} {fw / raw:>7.2f} {threads:>21.1f}")
    print(f"\nsummary: min_ratio={min(ratios):.3f} target={TARGET} {'ok' if min(ratios) >= TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
