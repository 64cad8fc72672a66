"""The live check in the real loop (hf inference, reinforce learner, tiny model, sync): every
train record carries the gap between the rollout logprobs hf reported and the learner's; a run
whose rollout logprobs are off warns once."""

import json
import logging

import pytest

import unstable_core
import unstable_hf.plugin as hf_plugin
import unstable_reinforce.plugin as reinforce_plugin
from unstable_core import RewardTransformSpec, hookimpl, load_plugins

SHIFT = 0.1


def shift_logprobs(step):
    """A backend that reports every rollout logprob 0.1 nats too high."""
    turn = step.turn.model_copy(update={"logprobs": [x + SHIFT for x in step.turn.logprobs]})
    return step.model_copy(update={"turn": turn})


class ShiftPlugin:
    @hookimpl
    def unstable_reward_transforms(self):
        return [RewardTransformSpec(name="shift-logprobs", stage="step", summary="rollout logprobs + 0.1",
                                    factory=lambda options, ctx: shift_logprobs)]


def run(tiny_path, run_dir, step_transforms=()):
    system = load_plugins(entry_points=False, strict=True,
                          extra=[("hf", hf_plugin), ("reinforce", reinforce_plugin), ("shift", ShiftPlugin())])
    lora = {"rank": 4, "alpha": 8}
    cfg = {
        "name": "gap", "train_envs": [{"env_id": "KuhnPoker-v0-train", "num_actors": 2, "template": "qwen3-zs"}],
        "opponents": ["random-valid"], "model": {"model": tiny_path},
        "inference": {"name": "hf", "device": "cpu", "max_tokens": 6, "batch_wait_ms": 5, "lora": lora},
        "learner": {"name": "reinforce", "device": "cpu", "lr": 1e-2, "mini_batch_size": 8, "max_generation_len": 6, "lora": lora},
        "training": {"learning_steps": 2, "batch_size": 8, "save_every": 1, "filter_zero_advantage": False},
        "collection": {"mode": "sync", "num_train_games": 4, "eval_games": 0},
        "reward": {"step": [{"name": name} for name in step_transforms]},
        "trackers": [{"name": "jsonl"}],
    }
    result = unstable_core.run(cfg, run_dir=run_dir, plugins=system)
    assert result.status == "completed"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["type"] == "train"]


def gap_warnings(caplog):
    return [r for r in caplog.records if r.name == "unstable" and "logprob_gap_tolerance" in r.getMessage()]


def test_a_sync_run_s_train_records_carry_a_gap_of_rounding(tiny_path, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    trains = run(tiny_path, tmp_path / "run")
    assert [r["step"] for r in trains] == [1, 2]
    for r in trains:  # checkpoints every update: every step of each batch was played by the weights updated
        assert r["staleness_max"] == 0 and r["logprob_gap_tokens"] == r["train_tokens"] > 0
        assert r["logprob_gap_max"] <= 1e-4 and r["logprob_gap_mean"] <= r["logprob_gap_max"]
    assert gap_warnings(caplog) == []


def test_shifted_rollout_logprobs_show_in_the_gap_and_warn_once(tiny_path, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    trains = run(tiny_path, tmp_path / "run", step_transforms=["shift-logprobs"])
    assert len(trains) == 2
    for r in trains:
        assert r["logprob_gap_tokens"] == r["train_tokens"] > 0
        assert r["logprob_gap_mean"] == pytest.approx(SHIFT, abs=1e-4)
        assert r["logprob_gap_max"] == pytest.approx(SHIFT, abs=1e-4)
    (warning,) = gap_warnings(caplog)  # two updates past the tolerance, one warning
    text = warning.getMessage()
    assert "learner step 1" in text and "repetition_penalty" in text and "temperature" in text and "stale adapter" in text
