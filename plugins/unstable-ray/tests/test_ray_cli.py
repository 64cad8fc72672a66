"""`unstable run` on the ray executor in a child process connected to the test session's
cluster: a rollout actor killed past max_restarts ends the run with exit 2 within seconds, and
SIGTERM shuts the actors down and leaves the run directory as the local executor does."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CONFIG = """
name = "long-tournament"
seed = 0
train_envs = [{ env_id = "TicTacToe-v0-train" }, { env_id = "KuhnPoker-v0-train" }]
opponents = ["greedy", "random-valid", "first-valid"]
[model_sampler]
name = "fixed"
[collection]
tournament_games = 1000000
num_train_games = 16
[executor]
name = "ray"
"""


def start(tmp_path: Path, address: str, *sets: str) -> tuple[subprocess.Popen, Path]:
    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "unstable_core.cli", "run", str(config), "--run-dir", str(run_dir),
            "--set", f"executor.address={address}", *[a for s in sets for a in ("--set", s)]]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    return proc, run_dir


def wait_until_playing(proc: subprocess.Popen, run_dir: Path, limit_s: float = 120) -> None:
    """Until the run has written a summary record (its actors are built and games are played)."""
    deadline = time.monotonic() + limit_s
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and '"type":"summary"' in metrics.read_text()):
        if proc.poll() is not None:
            pytest.fail(f"the run ended early (rc {proc.returncode}): {proc.stderr.read()}")
        if time.monotonic() > deadline:
            pytest.fail("the run wrote no summary within the limit")
        time.sleep(0.1)  # polling a file another process writes


def test_a_rollout_dying_past_max_restarts_ends_the_cli_run_with_exit_2_within_seconds(cluster, tmp_path):
    import ray

    from unstable_ray.testing import rollout_actor

    proc, run_dir = start(tmp_path, cluster, "executor.max_restarts=0")
    try:
        wait_until_playing(proc, run_dir)
        ray.kill(rollout_actor(str(run_dir)), no_restart=True)
        killed = time.monotonic()
        _out, err = proc.communicate(timeout=30)
        assert time.monotonic() - killed < 30
        assert proc.returncode == 2, err
        assert "rollout-0 actor died" in err and "max_restarts (0) are used up" in err
        assert "Traceback" not in err
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_shuts_the_actors_down_and_flushes_the_run(cluster, tmp_path):
    from unstable_ray.testing import rollout_actor

    proc, run_dir = start(tmp_path, cluster)
    try:
        wait_until_playing(proc, run_dir)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "Traceback" not in err
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        last = [r for r in records if r["type"] == "summary"][-1]
        registry = json.loads((run_dir / "registry.json").read_text())
        assert last["games"] > 0 and sum(m["games"] for m in registry["models"]) == 2 * last["games"]
        with pytest.raises(LookupError):
            rollout_actor(str(run_dir))
    finally:
        proc.kill()
        proc.wait()


def test_an_address_where_no_cluster_answers_fails_at_once_with_exit_2(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    proc = subprocess.run([sys.executable, "-m", "unstable_core.cli", "run", str(config), "--run-dir", str(tmp_path / "run"),
                           "--set", "executor.address=127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "no Ray cluster answers at 127.0.0.1:1" in proc.stderr and "Traceback" not in proc.stderr


def test_a_run_without_an_address_starts_a_local_cluster_with_the_executors_settings_and_stops_it(tmp_path):
    script = f"""
import os, ray, unstable_core
os.environ.pop("RAY_max_direct_call_object_size", None)
cfg = {{"name": "own-cluster", "train_envs": ["TicTacToe-v0-train"], "opponents": ["random-valid", "greedy"],
        "model_sampler": {{"name": "fixed"}}, "collection": {{"tournament_games": 40, "num_train_games": 8}},
        "executor": {{"name": "ray", "num_cpus": 1, "rollout": {{"num_cpus": 0.5}}}}}}
result = unstable_core.run(cfg, run_dir={str(tmp_path / "run")!r})
print(result.status, result.games_played, os.environ.get("RAY_max_direct_call_object_size"), ray.is_initialized())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-4:] == ["completed", "40", str(4 * 1024 * 1024), "False"]


def test_a_malformed_inline_result_setting_fails_with_one_line_naming_it(tmp_path):
    """Importing Ray with it would crash the process: it is checked before."""
    import os

    config = tmp_path / "run.toml"
    config.write_text(CONFIG)
    env = {**os.environ, "RAY_max_direct_call_object_size": "4MB"}
    proc = subprocess.run([sys.executable, "-m", "unstable_core.cli", "run", str(config), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "RAY_max_direct_call_object_size='4MB' is not a number of bytes" in proc.stderr and "Traceback" not in proc.stderr
