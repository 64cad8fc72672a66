"""collection.mode = "sync": two runs of one config give the same records, transcripts and weights."""

from __future__ import annotations

import json

import pytest

import unstable_core
from unstable_core.testing import toy_config, toy_plugin

TIMING = {"time", "games_per_s", "duration_s"}


def sync_config(**collection):
    return toy_config(
        model_sampler={"name": "fixed"},
        train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
        collection={"mode": "sync", "num_train_games": 8, "num_eval_games": 8, "eval_games": 40, "transcripts": 1.0, **collection},
    )


def outputs(run_dir):
    records = [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in (run_dir / "metrics.jsonl").open()]
    games = [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in (run_dir / "games" / "train.jsonl").open()]
    return records, games, (run_dir / "checkpoints" / "ckpt-20" / "table.json").read_text()


def test_two_sync_runs_are_identical(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    for name in ("a", "b"):
        unstable_core.run(sync_config(), run_dir=tmp_path / name, plugins=system)
    first, second = outputs(tmp_path / "a"), outputs(tmp_path / "b")
    assert first == second
    records = first[0]
    assert [r["step"] for r in records if r["type"] == "train"] == list(range(1, 21))
    assert sum(r["type"] == "summary" for r in records) == 21  # one a step and the final one: none on a timer


def test_sync_runs_of_different_seeds_differ(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    unstable_core.run(sync_config(), run_dir=tmp_path / "a", plugins=system)
    cfg = sync_config()
    cfg["seed"] = 1
    unstable_core.run(cfg, run_dir=tmp_path / "b", plugins=system)
    assert outputs(tmp_path / "a")[1] != outputs(tmp_path / "b")[1]


def test_sync_mode_with_a_buffer_smaller_than_a_batch_is_refused(make_plugin_system, tmp_path):
    cfg = sync_config()
    cfg["buffer"] = {"name": "step", "capacity": 8}
    with pytest.raises(unstable_core.UnstableError, match="capacity 8 is smaller than training.batch_size 16"):
        unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=make_plugin_system(toy_plugin))
