"""bench/samplers.py reads kept runs (--from) and says when its best sampler rests on one seed."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kept_run(folder: Path, exploitability: list[float]) -> None:
    """A kept run's metrics.jsonl as bench/samplers.py reads it: evaluations at updates 0, 5, ..."""
    folder.mkdir(parents=True)
    records = [{"type": "start", "time": 0.0, "config": {"train_envs": [{"env_id": "openspiel/kuhn_poker", "kwargs": {}}]}}]
    for i, value in enumerate(exploitability):
        records.append({"type": "summary", "step": 5 * i, "time": 10.0 * i, "envs": {"train": {"openspiel/kuhn_poker": {"games": 100}}}})
        records.append({"type": "eval", "step": 5 * i, "time": 10.0 * i, "policy": {"exploitability": value},
                        "mixtures": {"uniform": {"exploitability": value + 0.05}}})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def table(folder: Path) -> list[str]:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "samplers.py"), "--from", str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_best_sampler_on_one_seed_is_said_to_rest_on_one_seed(tmp_path):
    kept_run(tmp_path / "one" / "mirror-0", [0.37, 0.30, 0.20])
    kept_run(tmp_path / "one" / "psro-0", [0.37, 0.31, 0.25])
    lines = table(tmp_path / "one")
    summary = lines[-1]
    assert summary.startswith("summary: game=openspiel/kuhn_poker best_sampler=mirror best_exploitability=0.2000")
    assert "seeds=1 (one seed: not a ranking)" in summary
    assert "best sampler mirror rests on one seed" in lines[-2]


def test_the_seeds_behind_the_best_sampler_are_counted_and_no_caveat_with_three(tmp_path):
    for seed, end in enumerate((0.20, 0.22, 0.18)):
        kept_run(tmp_path / "three" / f"mirror-{seed}", [0.37, 0.30, end])
    kept_run(tmp_path / "three" / "psro-0", [0.37, 0.31, 0.25])
    lines = table(tmp_path / "three")
    assert lines[-1].endswith("seeds=3") and "best_sampler=mirror" in lines[-1]
    assert "best sampler mirror: 3 seeds" in lines[-2] and "psro: 1 seed" in lines[-2]
