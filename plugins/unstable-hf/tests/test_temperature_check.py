"""A learner's ``temperature`` is the temperature its logprobs are of: it must be the one the
trained model is sampled at (the backend's ``temperature``, or the model's own ``options``), or
the learner trains, and importance-weights, another policy than the one that played. ``config
check`` refuses the difference in one line naming both keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from unstable_core import ChosenComponents
from unstable_hf.inference import HFInferenceOptions
from unstable_hf.options import LearnerOptions, check_learner

ROOT = Path(__file__).resolve().parents[3]


def config_check(example: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    args = [arg for o in overrides for arg in ("--set", o)]
    return subprocess.run([sys.executable, "-m", "unstable_core.cli", "config", "check", str(ROOT / "examples" / example), *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


def chosen(learner: float, inference: float, model_options: dict | None = None) -> tuple[LearnerOptions, ChosenComponents]:
    options = LearnerOptions(temperature=learner)
    return options, ChosenComponents({"learner": options, "inference": HFInferenceOptions(temperature=inference)},
                                     model_options=model_options or {})


def test_a_learner_temperature_apart_from_the_sampling_one_is_refused_naming_both():
    with pytest.raises(ValueError) as refused:
        check_learner(*chosen(1.0, 0.6))
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith("temperature = 1.0 differs from inference.temperature = 0.6, the temperature the trained model is "
                           "sampled at"), line
    assert "set learner.temperature = 0.6" in line


def test_equal_temperatures_pass_and_the_models_own_option_is_the_one_compared():
    check_learner(*chosen(0.6, 0.6))
    check_learner(*chosen(0.7, 1.0, {"temperature": 0.7}))  # the model's own option wins over the backend's
    with pytest.raises(ValueError, match=r"differs from model.options.temperature = 0.5"):
        check_learner(*chosen(1.0, 1.0, {"temperature": 0.5}))


def test_a_greedy_trained_model_is_refused():
    with pytest.raises(ValueError, match=r"inference\.temperature = 0: the trained model is played greedily.*; set "
                                         r"inference\.temperature = 1\.0$"):
        check_learner(LearnerOptions(temperature=1.0),
                      ChosenComponents({"inference": HFInferenceOptions.model_construct(temperature=0.0)}))


def test_a_backend_without_a_temperature_is_not_compared():
    check_learner(LearnerOptions(temperature=0.5), ChosenComponents({}))


def test_config_check_refuses_the_difference_and_accepts_equal_temperatures():
    pytest.importorskip("unstable_reinforce", reason="the example's learner comes from the reinforce plugin")
    refused = config_check("kuhn-tiny.toml", "learner.temperature=0.7")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert ("learner: temperature = 0.7 differs from inference.temperature = 1.0, the temperature the trained model is "
            "sampled at") in refused.stderr
    accepted = config_check("kuhn-tiny.toml", "learner.temperature=0.7", "inference.temperature=0.7")
    assert accepted.returncode == 0, accepted.stderr
