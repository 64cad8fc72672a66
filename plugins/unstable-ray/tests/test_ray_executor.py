"""The `ray` executor against the local one: same records, restarts, failures that end runs."""

from __future__ import annotations

import pytest

import unstable_core
import unstable_ray.plugin as ray_plugin
from unstable_core import RunFailed
from unstable_core.testing import ExecutorContract
from unstable_core.testing.executor import TOURNAMENT as CONTRACT_TOURNAMENT
from unstable_core.testing.executor import outcomes

TOURNAMENT = {**CONTRACT_TOURNAMENT, "collection": {"tournament_games": 200, "num_train_games": 16}}


def ray_executor(**options):
    return {"name": "ray", **options}


@pytest.fixture(scope="module")
def local_tournament(tmp_path_factory):
    return unstable_core.run(TOURNAMENT, run_dir=tmp_path_factory.mktemp("t") / "local")


class TestRayExecutor(ExecutorContract):
    """Two rollout replicas; checkpoints read from the run directory; every role an actor."""

    plugin = ray_plugin
    name = "ray"
    options = {"rollout_replicas": 2, "rollout": {"num_cpus": 0.5}, "learner": {"num_cpus": 0.5}, "in_driver": []}

    @pytest.fixture(autouse=True)
    def _ray(self, cluster):
        pass


class TestRayExecutorBytesInDriver(TestRayExecutor):
    """One replica, checkpoints through the object store, league and buffer in the driver (the default)."""

    options = {"shared_filesystem": False, "in_driver": ["league", "buffer"], "learner": {"num_cpus": 0.5}}


def test_a_rollout_actor_killed_mid_run_is_restarted_and_the_run_gives_the_same_records(cluster, tmp_path, local_tournament):
    from unstable_ray.testing import RolloutKiller

    killer = RolloutKiller(at_games=(48, 120))
    system = unstable_core.load_plugins(extra=[("killer", killer)])
    cfg = {**TOURNAMENT, "executor": ray_executor(max_restarts=2)}
    result = unstable_core.run(cfg, run_dir=tmp_path / "ray", plugins=system)
    assert killer.killed == 2
    assert result.status == "completed" and result.games_played == 200
    assert outcomes(result) == outcomes(local_tournament)  # the lost batches were played again


def test_a_rollout_worker_killed_by_sigkill_is_one_line_a_restart_record_and_a_count(cluster, tmp_path, capsys):
    """``kill -9`` of the rollout's worker process (named ``ray::RolloutActor``): the run goes on,
    the console says it in one line naming the role and pid (none of Ray's own paragraphs), and
    metrics.jsonl holds a ``restart`` record counted by the summaries."""
    import json
    import signal

    from unstable_ray.testing import RolloutKiller

    killer = RolloutKiller(at_games=(48,), signal=signal.SIGKILL)
    system = unstable_core.load_plugins(extra=[("killer", killer)])
    cfg = {**TOURNAMENT, "executor": ray_executor(max_restarts=2), "trackers": [{"name": "jsonl"}, {"name": "console", "live": False}]}
    result = unstable_core.run(cfg, run_dir=tmp_path / "ray", plugins=system)
    assert result.status == "completed" and result.games_played == 200
    assert killer.titles[0].startswith("ray::RolloutActor"), killer.titles
    records = [json.loads(line) for line in (tmp_path / "ray" / "metrics.jsonl").read_text().splitlines()]
    (restart,) = [r for r in records if r["type"] == "restart"]
    assert restart["role"] == "rollout-0" and restart["pid"] == killer.killed_pids[0]
    assert (restart["restarts"], restart["max_restarts"]) == (1, 2) and "\n" not in restart["cause"]
    assert [r for r in records if r["type"] == "summary"][-1]["restarts"] == 1
    out = capsys.readouterr()
    died = [line for line in (out.out + out.err).splitlines() if "died" in line]
    assert len(died) == 1 and f"] rollout-0 (pid {killer.killed_pids[0]}) died at step 0: " in died[0], died
    assert died[0].endswith("; restarted (1 of 2)") and len(died[0]) < 200, died
    assert "(raylet)" not in out.out + out.err


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


def test_without_a_shared_filesystem_replicas_serve_past_checkpoints_from_their_own_copies(cluster, tmp_path):
    """A replica restarted after two publications gets both checkpoints as bytes; once the
    checkpoints are gone from the run directory (a node that never saw it), a game against the
    older one is still served, from the replica's copy."""
    import asyncio
    import shutil

    from unstable_core import EnvSpec, GameSpec, ModelRef, checkpoint_ref
    from unstable_core.testing import toy_config, toy_plugin
    from unstable_ray.executor import RayExecutor
    from unstable_ray.options import RayOptions

    system = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    job = unstable_core.build(toy_config(), run_dir=tmp_path / "run", plugins=system)
    executor = RayExecutor(RayOptions(shared_filesystem=False, max_restarts=1, learner={"num_cpus": 0.5}), system)
    try:
        roles = executor.start(job.plan)
        rollout = roles.rollouts[0]

        async def scenario():
            saved = [await roles.learner.save(str(tmp_path / "run" / "checkpoints" / uid), uid) for uid in ("ckpt-1", "ckpt-2")]
            for ckpt in saved:
                assert await rollout.set_policy(ckpt) == ckpt.version
            import os

            from ray.exceptions import RayActorError

            # the actor's process exits while serving this call: it is dead once the call fails
            # (ray.kill only asks for the kill, so a call sent right after it may still be served)
            with pytest.raises(RayActorError):
                await rollout.actor.__ray_call__.remote(lambda actor: os._exit(1))
            assert await rollout.play([]) == [] and executor.restarts == 1  # restarted, checkpoints re-sent
            shutil.move(tmp_path / "run" / "checkpoints", tmp_path / "moved")
            past = checkpoint_ref(saved[0], job.plan.config.model_ref())
            seats = [past, ModelRef(uid="random-valid", model="random-valid")]
            specs = [GameSpec(game_idx=i, seed=i, env=EnvSpec(env_id="PickBest-v0"), seats=seats, mode="tournament")
                     for i in range(4)]
            return specs, await rollout.play(specs)

        specs, results = asyncio.run(scenario())
        assert all(r.outcome != "failed" for r in results), [r.error for r in results]
        assert [r.game for r in results] == specs  # the results name the seats as the driver does
    finally:
        executor.shutdown()


RAY_DEATH = ("The actor died unexpectedly before finishing this task.\n\tclass_name: RolloutActor\nThe actor is dead because its "
             "worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
             "connection error code 2. End of file. Some common causes include: (1) the process was killed by the OOM killer")


def test_a_death_is_one_short_line_and_rays_whole_account_only_when_verbose(monkeypatch, caplog):
    from ray.exceptions import RayActorError

    from unstable_ray.actors import death

    exc = RayActorError(error_msg=RAY_DEATH)
    short = "its worker process has died (SYSTEM_ERROR: Worker unexpectedly exits with a connection error code 2. End of file)"
    monkeypatch.delenv("UNSTABLE_VERBOSE", raising=False)
    assert death(exc) == short and "OOM killer" not in caplog.text
    assert death(RayActorError(error_msg="The actor was killed by ray.kill().")) == "The actor was killed by ray.kill()."
    monkeypatch.setenv("UNSTABLE_VERBOSE", "1")
    assert death(exc) == short and "Some common causes include: (1) the process was killed by the OOM killer" in caplog.text
