"""A tiny language model trained under the ray executor: the same run as in-process (sync mode),
and the main job's shape (async, two rollout replicas) completing with every replica serving
each new checkpoint. Needs the hf and reinforce plugins (CI installs them with this one)."""

from __future__ import annotations

import json

import pytest

import unstable_core
from unstable_core.testing.executor import records

pytest.importorskip("unstable_hf", reason="the tiny model comes from the hf plugin")
pytest.importorskip("unstable_reinforce", reason="the learner comes from the reinforce plugin")

LORA = {"rank": 4, "alpha": 8}


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    from unstable_hf.testing import build_fast_tiny

    return build_fast_tiny(tmp_path_factory.mktemp("tiny-cache"))


def tiny_config(tiny_path, mode, steps, executor=None):
    return {
        "name": "tiny", "seed": 3,
        "train_envs": [{"env_id": "KuhnPoker-v0-train", "num_actors": 1, "template": "qwen3-zs"}],
        "opponents": ["random-valid"], "model": {"model": tiny_path}, "model_sampler": {"name": "random", "fixed_prob": 0.5},
        "inference": {"name": "hf", "device": "cpu", "max_tokens": 6, "batch_wait_ms": 5, "lora": LORA},
        "learner": {"name": "reinforce", "device": "cpu", "lr": 1e-2, "mini_batch_size": 8, "max_generation_len": 6, "lora": LORA},
        "training": {"learning_steps": steps, "batch_size": 8, "save_every": 1, "eval_every": steps,
                     "filter_zero_advantage": False},
        "collection": {"mode": mode, "num_train_games": 4, "num_eval_games": 4, "eval_games": 8},
        "trackers": [{"name": "jsonl"}],
        "executor": executor or {"name": "local"},
    }


def adapter(run_dir, step):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"ckpt-{step}" / "adapter_model.safetensors"))


def test_a_sync_tiny_model_run_gives_the_same_metrics_and_adapter_as_local(cluster, tmp_path, tiny_path):
    import torch

    steps = 3
    local = unstable_core.run(tiny_config(tiny_path, "sync", steps), run_dir=tmp_path / "local")
    ray = {"name": "ray", "rollout": {"num_cpus": 0.5}, "learner": {"num_cpus": 0.5}}
    remote = unstable_core.run(tiny_config(tiny_path, "sync", steps, ray), run_dir=tmp_path / "ray")
    assert local.status == remote.status == "completed" and remote.learner_steps == steps
    assert records(tmp_path / "ray") == records(tmp_path / "local")
    mine, theirs = adapter(tmp_path / "ray", steps), adapter(tmp_path / "local", steps)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_the_main_job_shape_on_two_rollout_replicas_completes_and_trains(cluster, tmp_path, tiny_path):
    import torch

    steps = 4
    ray = {"name": "ray", "rollout_replicas": 2, "rollout": {"num_cpus": 0.5}, "learner": {"num_cpus": 0.5}}
    result = unstable_core.run(tiny_config(tiny_path, "async", steps, ray), run_dir=tmp_path / "run")
    assert result.status == "completed" and result.learner_steps == steps
    trains = records(tmp_path / "run", ("train",))
    assert [r["step"] for r in trains] == list(range(1, steps + 1))
    assert all(r["train_tokens"] > 0 and r["grad_norm"] > 0 for r in trains)
    first, last = adapter(tmp_path / "run", 1), adapter(tmp_path / "run", steps)
    assert any(not torch.equal(first[k], last[k]) for k in first)  # the policy moved
    # the final evaluation played the last checkpoint, which every replica confirmed serving
    final = [r for r in records(tmp_path / "run", ("eval",)) if r["step"] == steps]
    assert final and all(r["model"] == f"ckpt-{steps}" and r["games"] > 0 for r in final)
    games = [json.loads(line) for line in (tmp_path / "run" / "games" / "train.jsonl").read_text().splitlines()]
    assert {t["policy_version"] for g in games for t in g["turns"]} <= set(range(steps + 1))
