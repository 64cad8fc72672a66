"""hf inference + reinforce learner in the real loop, on a tiny model."""

import json
import random

import unstable_core
import unstable_hf.plugin as hf_plugin
import unstable_reinforce.plugin as reinforce_plugin
from unstable_core import load_plugins
from unstable_core.testing import kill_after, restored_state, run_with_kills, start_run
from unstable_hf.testing import max_weight_diff


def test_two_updates_end_to_end(tiny_path, tmp_path):
    system = load_plugins(entry_points=False, extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin)], strict=True)
    cfg = {
        "name": "it", "train_envs": [{"env_id": "KuhnPoker-v0-train", "num_actors": 2, "template": "qwen3-zs"}],
        "opponents": ["random-valid"], "model": {"model": tiny_path},
        "inference": {"name": "hf", "device": "cpu", "max_tokens": 6, "batch_wait_ms": 5, "lora": {"rank": 4, "alpha": 8}},
        "learner": {"name": "reinforce", "device": "cpu", "lr": 1e-3, "mini_batch_size": 8, "max_generation_len": 6, "lora": {"rank": 4, "alpha": 8}},
        "training": {"learning_steps": 2, "batch_size": 8, "save_every": 1, "filter_zero_advantage": False},
        "collection": {"num_train_games": 4, "num_eval_games": 4, "eval_games": 4, "transcripts": 1.0},
        "trackers": [{"name": "jsonl"}],
    }
    job = unstable_core.build(cfg, run_dir=tmp_path / "run", plugins=system)
    end = job.start()
    assert end.status == "completed" and job.roles.learner.learner.version == 2
    assert job.roles.league.registry.current.uid == "ckpt-2"
    for uid in ("ckpt-1", "ckpt-2"):
        assert (tmp_path / "run" / "checkpoints" / uid / "adapter_model.safetensors").exists()
    backend = job.roles.rollouts[0].backend("hf")
    assert "ckpt-2" in backend._adapters and len(backend._bases) == 1  # final eval served by the new adapter
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trains = [r for r in records if r["type"] == "train"]
    assert [r["step"] for r in trains] == [1, 2]
    assert all("staleness_mean" in r and "grad_norm" in r and r["train_tokens"] > 0 for r in trains)
    assert sorted({r["step"] for r in records if r["type"] == "eval"}) == [0, 2]
    games = [json.loads(line) for line in (tmp_path / "run" / "games" / "train.jsonl").read_text().splitlines()]
    assert {t["policy_version"] for g in games for t in g["turns"]} <= {0, 1, 2}
    assert all(t["policy_version"] <= g["step"] for g in games for t in g["turns"])


def test_a_tiny_model_is_built_inside_a_run(tmp_path):
    """The learner's factory builds the tiny model while the driver's event loop runs."""
    from unstable_hf.testing import FAST_TINY

    system = load_plugins(entry_points=False, extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin)], strict=True)
    cache = str(tmp_path / "cache")
    lora = {"rank": 4, "alpha": 8}
    cfg = {
        "name": "build", "train_envs": [{"env_id": "KuhnPoker-v0-train", "num_actors": 2, "template": "qwen3-zs"}],
        "opponents": ["random-valid"], "model": {"model": FAST_TINY},
        "inference": {"name": "hf", "device": "cpu", "max_tokens": 4, "batch_wait_ms": 5, "cache_dir": cache, "lora": lora},
        "learner": {"name": "reinforce", "device": "cpu", "mini_batch_size": 8, "max_generation_len": 4, "cache_dir": cache, "lora": lora},
        "training": {"learning_steps": 1, "batch_size": 8, "filter_zero_advantage": False},
        "collection": {"num_train_games": 4, "num_eval_games": 4, "eval_games": 2},
        "trackers": [{"name": "jsonl"}],
    }
    result = unstable_core.run(cfg, run_dir=tmp_path / "run", plugins=system)
    assert result.status == "completed" and result.learner_steps == 1
    assert len(list((tmp_path / "cache").glob("tiny-*"))) == 1


def resume_config(tiny_path, mode="sync", steps=4):
    return {
        "name": "it", "seed": 3, "train_envs": [{"env_id": "KuhnPoker-v0-train", "num_actors": 1, "template": "qwen3-zs"}],
        "opponents": ["random-valid"], "model": {"model": tiny_path}, "model_sampler": {"name": "fixed"},
        "inference": {"name": "hf", "device": "cpu", "max_tokens": 6, "batch_wait_ms": 5, "lora": {"rank": 4, "alpha": 8}},
        "learner": {"name": "reinforce", "device": "cpu", "lr": 1e-2, "mini_batch_size": 8, "max_generation_len": 6, "lora": {"rank": 4, "alpha": 8}},
        "training": {"learning_steps": steps, "batch_size": 8, "save_every": 1, "filter_zero_advantage": False},
        "collection": {"mode": mode, "num_train_games": 4, "eval_games": 0},
        "trackers": [{"name": "jsonl"}],
    }


ADAPTER = "adapter_model.safetensors"


def adapter(run_dir, step):
    from safetensors.torch import load_file

    return load_file(str(run_dir / "checkpoints" / f"ckpt-{step}" / ADAPTER))


def train_steps(run_dir):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in records if r["type"] == "train"]


def test_a_sync_run_killed_at_random_points_ends_with_the_same_adapter(tiny_path, tmp_path):
    """Sync mode, 4 updates, SIGKILLed twice at random points (the child processes load the
    installed hf and reinforce plugins) and resumed: the adapter equals the uninterrupted run's
    exactly, and each learner step is in metrics.jsonl once."""
    system = load_plugins(entry_points=False, extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin)], strict=True)
    cfg = resume_config(tiny_path)
    unstable_core.run(cfg, run_dir=tmp_path / "full", plugins=system)
    landed = run_with_kills(tmp_path / "killed", cfg, random.Random(1), kills=2, most_events=18)  # 16 games + 4 updates
    assert landed >= 1
    assert train_steps(tmp_path / "killed") == [1, 2, 3, 4]
    full, killed = adapter(tmp_path / "full", 4), adapter(tmp_path / "killed", 4)
    first = adapter(tmp_path / "full", 1)
    assert any(not (first[k] == full[k]).all() for k in full)  # training moved the adapter
    assert max_weight_diff(full, killed) == 0.0


def test_a_finished_run_extended_by_resume_ends_with_the_same_adapter(tiny_path, tmp_path):
    system = load_plugins(entry_points=False, extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin)], strict=True)
    unstable_core.run(resume_config(tiny_path), run_dir=tmp_path / "full", plugins=system)
    unstable_core.run(resume_config(tiny_path, steps=2), run_dir=tmp_path / "part", plugins=system)
    result = unstable_core.run(None, run_dir=tmp_path / "part", plugins=system, resume=True, overrides=["training.learning_steps=4"])
    assert result.learner_steps == 4 and train_steps(tmp_path / "part") == [1, 2, 3, 4]
    full, part = adapter(tmp_path / "full", 4), adapter(tmp_path / "part", 4)
    assert max_weight_diff(full, part) == 0.0


def test_after_an_async_kill_the_learner_restores_its_optimizer_state(tiny_path, tmp_path):
    """Async mode: killed after its second update, the restored learner (adapter, AdamW moments
    and step counts, torch RNG, version) equals the snapshot exactly."""
    system = load_plugins(entry_points=False, extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin)], strict=True)
    run_dir = tmp_path / "r"
    proc = start_run(run_dir, resume_config(tiny_path, mode="async", steps=6))
    try:
        assert kill_after(proc, 2, kinds="u"), proc.stderr.read().decode()[-3000:]  # after the second update
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    step, saved, restored = restored_state(run_dir, system)
    assert step >= 1
    assert restored["learner"] == saved["learner"]
    optimizer = restored["learner"]["learner"]["optimizers"]["policy"]
    assert optimizer["state"]  # AdamW moments exist: something was restored, not an empty state
    assert restored["league"]["game_idx"] == saved["league"]["game_idx"]


def test_a_colocated_sync_run_sleeps_the_backend_around_every_update_and_learns_the_same(tiny_path, tmp_path, monkeypatch):
    """training.colocate: the hf backend sleeps before each update and wakes after it (and on the
    CPU moves nothing), the train records carry sleep_s / wake_s, and the run ends with exactly
    the adapter of the same sync run without colocation."""
    from unstable_hf.inference import HFInference

    system = load_plugins(entry_points=False, extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin)], strict=True)
    unstable_core.run(resume_config(tiny_path, steps=2), run_dir=tmp_path / "plain", plugins=system)
    calls = []
    sleep, wake = HFInference.sleep, HFInference.wake
    monkeypatch.setattr(HFInference, "sleep", lambda self: (calls.append("sleep"), sleep(self))[1])
    monkeypatch.setattr(HFInference, "wake", lambda self: (calls.append("wake"), wake(self))[1])
    cfg = resume_config(tiny_path, steps=2)
    cfg["training"]["colocate"] = True
    result = unstable_core.run(cfg, run_dir=tmp_path / "colocated", plugins=system)
    assert result.status == "completed"
    assert calls == ["sleep", "wake", "sleep", "wake"]
    records = [json.loads(line) for line in (tmp_path / "colocated" / "metrics.jsonl").read_text().splitlines()]
    trains = [r for r in records if r["type"] == "train"]
    assert len(trains) == 2 and all(r["sleep_s"] >= 0 and r["wake_s"] >= 0 for r in trains)
    plain, colocated = adapter(tmp_path / "plain", 2), adapter(tmp_path / "colocated", 2)
    assert max_weight_diff(plain, colocated) == 0.0


def test_colocate_needs_sync_mode_and_a_backend_that_releases_memory(tiny_path, tmp_path):
    import pytest

    from unstable_core import ConfigError

    system = load_plugins(entry_points=False, extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin)], strict=True)
    cfg = resume_config(tiny_path, mode="async")
    cfg["training"]["colocate"] = True
    with pytest.raises(ConfigError, match='training.colocate = true puts the inference backend to sleep.*collection.mode = "sync"'):
        unstable_core.build(cfg, run_dir=tmp_path / "a", plugins=system)
    cfg = resume_config(tiny_path)
    cfg["training"]["colocate"] = True
    cfg["inference"] = {"name": "scripted"}
    with pytest.raises(ConfigError, match="inference 'scripted' cannot release its memory"):
        unstable_core.build(cfg, run_dir=tmp_path / "b", plugins=system)
