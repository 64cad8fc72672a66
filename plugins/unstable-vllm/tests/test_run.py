"""The vllm backend in a run: the contract, a short kuhn-tiny training run served by vLLM, and
the config checks that need no engine."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import unstable_core
import unstable_vllm.plugin as plugin
from unstable_core import ModelRef
from unstable_core.testing import InferenceContract
from unstable_core.testing.contracts import build_component_for
from unstable_core.testing.executor import records

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "kuhn-tiny-vllm.toml"
SMALL = {"dtype": "float32", "max_tokens": 6, "max_lora_rank": 8, "max_model_len": 512, "enforce_eager": True, "kv_cache_gib": 1}


@pytest.mark.vllm
class TestContract(InferenceContract):
    plugin = plugin
    name = "vllm"
    options = SMALL

    @pytest.fixture
    def component(self, spec, system, tmp_path, tiny_path):
        self.model = ModelRef(uid="m", kind="base", backend="vllm", model=tiny_path)
        built = build_component_for(self, spec, system, tmp_path)
        yield built
        built.close()


@pytest.mark.vllm
def test_a_tiny_model_trains_with_vllm_serving_each_checkpoint(tmp_path, tiny_path):
    pytest.importorskip("unstable_reinforce", reason="the learner comes from the reinforce plugin")
    lora = {"rank": 4, "alpha": 8}
    steps = 3
    config = {
        "name": "tiny-vllm", "seed": 3,
        "train_envs": [{"env_id": "KuhnPoker-v0-train", "num_actors": 1, "template": "qwen3-zs"}],
        "opponents": ["random-valid"], "model": {"model": tiny_path}, "model_sampler": {"name": "random", "fixed_prob": 0.5},
        "inference": {"name": "vllm", **SMALL, "temperature": 1.0},
        "learner": {"name": "reinforce", "device": "cpu", "lr": 1e-2, "mini_batch_size": 8, "max_generation_len": 6, "lora": lora},
        "training": {"learning_steps": steps, "batch_size": 8, "save_every": 1, "eval_every": steps, "filter_zero_advantage": False},
        "collection": {"num_train_games": 4, "num_eval_games": 4, "eval_games": 8},
        "trackers": [{"name": "jsonl"}],
    }
    result = unstable_core.run(config, run_dir=tmp_path / "run")
    assert result.status == "completed" and result.learner_steps == steps
    assert [r["step"] for r in records(tmp_path / "run", ("train",))] == list(range(1, steps + 1))
    final = [r for r in records(tmp_path / "run", ("eval",)) if r["step"] == steps]
    assert final and all(r["model"] == f"ckpt-{steps}" and r["games"] > 0 for r in final)
    # every turn was produced by the version of the model in its seat; checkpoints were played
    games = [json.loads(line) for line in (tmp_path / "run" / "games" / "train.jsonl").read_text().splitlines()]
    versions = [({s["player_id"]: s["version"] for s in g["seats"]}, g["turns"]) for g in games]
    assert all(t["policy_version"] == seats[t["player_id"]] for seats, turns in versions for t in turns)
    assert any(v >= 1 for seats, _ in versions for v in seats.values())


def config_check(*overrides: str) -> subprocess.CompletedProcess[str]:
    args = [arg for o in overrides for arg in ("--set", o)]
    return subprocess.run(
        [sys.executable, "-m", "unstable_core.cli", "config", "check", str(EXAMPLE), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"},
    )


def test_the_example_passes_config_check_without_vllm_installed():
    done = config_check()
    assert done.returncode == 0, done.stderr
    assert "inference=vllm" in done.stdout


def test_a_learner_rank_above_max_lora_rank_fails_config_check_naming_both():
    done = config_check("learner.lora.rank=32")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "inference: max_lora_rank = 16 cannot hold the learner's LoRA rank 32: set inference.max_lora_rank = 32" in done.stderr


def test_learner_modules_to_save_fail_config_check_under_vllm():
    done = config_check('learner.lora.modules_to_save=["model.norm"]')
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "inference: vLLM serves LoRA weights only, not the learner's lora.modules_to_save ['model.norm']" in done.stderr


def test_a_trained_models_own_temperature_apart_from_the_learners_fails_config_check_naming_both():
    done = config_check("model.options={temperature=0.5}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert ("learner: temperature = 1.0 differs from model.options.temperature = 0.5, the temperature the trained model is "
            "sampled at") in done.stderr
    assert config_check("model.options={temperature=0.5}", "learner.temperature=0.5").returncode == 0
    done = config_check("inference.temperature=0.6")  # vLLM's default: the learner's must follow it
    assert done.returncode == 2 and "differs from inference.temperature = 0.6" in done.stderr


def test_a_rank_vllm_has_no_slot_for_fails_config_check():
    done = config_check("inference.max_lora_rank=12")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "inference.max_lora_rank" in done.stderr and "1, 8, 16, 32" in done.stderr


@pytest.mark.vllm
def test_an_engine_that_does_not_start_in_time_fails_naming_the_option_and_leaves_no_process(tiny_path):
    import psutil

    from unstable_vllm.inference import VLLMInference
    from unstable_vllm.options import VLLMInferenceOptions

    def engine_processes():
        found = {}
        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE and p.name().startswith("VLLM"):
                    found[p.pid] = p
        return found

    before = engine_processes()  # earlier tests' engines may still be exiting
    backend = VLLMInference(VLLMInferenceOptions(**SMALL, engine_start_timeout_s=1))
    with pytest.raises(RuntimeError, match="did not start within engine_start_timeout_s = 1 s"):
        backend.prepare(ModelRef(uid="base", kind="base", backend="vllm", model=tiny_path))
    started = [p for pid, p in engine_processes().items() if pid not in before]
    _, alive = psutil.wait_procs(started, timeout=30)  # a killed process may take a moment to be reaped
    assert not alive, [p.pid for p in alive]
