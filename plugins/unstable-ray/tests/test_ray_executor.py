"""The `ray` executor against the local one: same records, restarts, failures that end runs."""

from __future__ import annotations

import asyncio

import pytest

import unstable_core
from unstable_core import RunFailed
from unstable_core.testing import toy_config, toy_plugin

TOURNAMENT = {
    "name": "tournament", "seed": 0,
    "train_envs": [{"env_id": "TicTacToe-v0-train"}, {"env_id": "KuhnPoker-v0-train"}],
    "opponents": ["greedy", "random-valid", "first-valid"],
    "model_sampler": {"name": "fixed"},
    "collection": {"tournament_games": 200, "num_train_games": 16},
    "trackers": [],
}


def ray_executor(**options):
    return {"name": "ray", **options}


def outcomes(result):
    return sorted((r.env_id, r.model, r.opponent, r.games, r.failed, r.win_rate, r.draw_rate, r.loss_rate)
                  for r in result.eval_records)


@pytest.fixture(scope="module")
def local_tournament(tmp_path_factory):
    return unstable_core.run(TOURNAMENT, run_dir=tmp_path_factory.mktemp("t") / "local")


@pytest.mark.parametrize("replicas, in_driver", [(1, []), (2, []), (2, ["league", "buffer"])])
def test_a_tournament_gives_the_same_records_as_with_the_local_executor(cluster, tmp_path, local_tournament, replicas, in_driver):
    cfg = {**TOURNAMENT, "executor": ray_executor(rollout_replicas=replicas, rollout={"num_cpus": 0.5}, in_driver=in_driver)}
    result = unstable_core.run(cfg, run_dir=tmp_path / "ray")
    assert result.status == "completed" and result.games_played == 200
    assert outcomes(result) == outcomes(local_tournament)


def toy_sync():
    """The toy's tabular learner against random-valid, in sync mode (nothing depends on timing)."""
    return toy_config(
        training={"learning_steps": 12, "batch_size": 16, "eval_every": 6},
        model_sampler={"name": "fixed"},
        train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
        collection={"mode": "sync", "num_train_games": 8, "num_eval_games": 8, "eval_games": 40},
    )


def train_records(run_dir):
    import json

    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    drop = {"time", "games_per_s", "duration_s"}
    return [{k: v for k, v in r.items() if k not in drop} for r in lines if r["type"] in ("train", "eval")]


@pytest.mark.parametrize("shared", [True, False])
def test_sync_training_gives_the_same_metrics_and_policy_as_local(cluster, tmp_path, shared):
    system = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    cfg = toy_sync()
    local = unstable_core.run(cfg, run_dir=tmp_path / "local", plugins=system)
    ray_cfg = {**cfg, "executor": ray_executor(rollout_replicas=2, rollout={"num_cpus": 0.5}, learner={"num_cpus": 0.5},
                                                shared_filesystem=shared)}
    remote = unstable_core.run(ray_cfg, run_dir=tmp_path / "ray", plugins=system)
    assert remote.status == local.status == "completed"
    assert remote.learner_steps == local.learner_steps > 0
    assert train_records(tmp_path / "ray") == train_records(tmp_path / "local")
    last = f"checkpoints/ckpt-{local.learner_steps}"
    files = sorted(p.name for p in (tmp_path / "local" / last).iterdir())
    assert files and files == sorted(p.name for p in (tmp_path / "ray" / last).iterdir())
    for name in files:
        assert (tmp_path / "ray" / last / name).read_bytes() == (tmp_path / "local" / last / name).read_bytes()


def test_a_rollout_actor_killed_mid_run_is_restarted_and_the_run_gives_the_same_records(cluster, tmp_path, local_tournament):
    from unstable_ray.testing import RolloutKiller

    killer = RolloutKiller(at_games=(48, 120))
    system = unstable_core.load_plugins(extra=[("killer", killer)])
    cfg = {**TOURNAMENT, "executor": ray_executor(max_restarts=2)}
    result = unstable_core.run(cfg, run_dir=tmp_path / "ray", plugins=system)
    assert killer.killed == 2
    assert result.status == "completed" and result.games_played == 200
    assert outcomes(result) == outcomes(local_tournament)  # the lost batches were played again


def test_a_rollout_actor_dying_past_max_restarts_fails_the_run_naming_it(cluster, tmp_path):
    from unstable_ray.testing import RolloutKiller

    system = unstable_core.load_plugins(extra=[("killer", RolloutKiller(at_games=(32, 64)))])
    cfg = {**TOURNAMENT, "executor": ray_executor(max_restarts=1)}
    with pytest.raises(RunFailed, match=r"rollout-0 actor died .*max_restarts \(1\) are used up"):
        unstable_core.run(cfg, run_dir=tmp_path / "ray", plugins=system)


def test_a_placement_the_cluster_cannot_hold_fails_with_what_was_asked(cluster, tmp_path):
    cfg = {**TOURNAMENT, "executor": ray_executor(rollout_replicas=2, rollout={"num_cpus": 3, "num_gpus": 1},
                                                 placement_timeout_s=1)}
    with pytest.raises(RunFailed) as info:
        unstable_core.run(cfg, run_dir=tmp_path / "ray")
    message = str(info.value)
    assert "cannot hold" in message and "CPU 6, GPU 2" in message and "the cluster has CPU 2, GPU 0" in message
    import ray

    assert ray.util.placement_group_table() and all(
        g["state"] == "REMOVED" for g in ray.util.placement_group_table().values())


def test_an_error_a_role_raises_comes_back_as_itself(cluster, tmp_path):
    from unstable_ray.executor import RayExecutor
    from unstable_ray.options import RayOptions

    job = unstable_core.build(TOURNAMENT, run_dir=tmp_path / "run")
    executor = RayExecutor(RayOptions(), job.plugins)
    try:
        roles = executor.start(job.plan)
        specs = asyncio.run(roles.league.schedule(4, "tournament"))
        assert [s.game_idx for s in specs] == [0, 1, 2, 3]
        with pytest.raises(AttributeError, match="no_such_method"):
            asyncio.run(roles.league.no_such_method())
    finally:
        executor.shutdown()
