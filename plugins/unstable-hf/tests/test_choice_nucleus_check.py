"""With ``collection.answers = "choice"`` the hf backend draws among the offered answers from
their top-p nucleus renormalised, while a learner's importance-sampling ratio divides its own
``pi(c)``, of the full tempered softmax, by that probability: with ``top_p`` below 1 the ratio
is not 1 at identical weights. ``config check`` refuses importance sampling there, one line
naming the keys."""

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


def test_importance_sampling_of_choices_drawn_from_a_nucleus_is_refused_in_one_line():
    reinforce = pytest.importorskip("unstable_reinforce.options")
    sampled = reinforce.ReinforceOptions(importance_sampling=True)
    with pytest.raises(ValueError) as refused:
        check_learner(sampled, ChosenComponents({"inference": HFInferenceOptions(top_p=0.9)}, answers="choice"))
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith('importance_sampling with collection.answers = "choice" and inference.top_p = 0.9'), line
    assert line.endswith("set inference.top_p = 1 or importance_sampling = false"), line
    with pytest.raises(ValueError, match=r"and model\.options\.top_p = 0\.5: "):  # the model's own option wins
        check_learner(sampled, ChosenComponents({"inference": HFInferenceOptions(top_p=1.0)}, model_options={"top_p": 0.5},
                                                answers="choice"))
    # what passes: top_p 1, free answers, no importance sampling, a learner without the option
    check_learner(sampled, ChosenComponents({"inference": HFInferenceOptions(top_p=1.0)}, answers="choice"))
    check_learner(sampled, ChosenComponents({"inference": HFInferenceOptions(top_p=0.9)}, answers="free"))
    check_learner(reinforce.ReinforceOptions(), ChosenComponents({"inference": HFInferenceOptions(top_p=0.9)}, answers="choice"))
    check_learner(LearnerOptions(), ChosenComponents({"inference": HFInferenceOptions(top_p=0.9)}, answers="choice"))


def test_config_check_refuses_it_with_exit_status_2():
    pytest.importorskip("unstable_reinforce", reason="the example's learner comes from the reinforce plugin")

    def check(*overrides: str) -> subprocess.CompletedProcess[str]:
        sets = ["collection.answers=choice", "learner.importance_sampling=true", *overrides]
        return subprocess.run([sys.executable, "-m", "unstable_core.cli", "config", "check", str(ROOT / "examples" / "openspiel-kuhn-tiny.toml"),
                               *[a for s in sets for a in ("--set", s)]], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "NO_COLOR": "1"})

    refused = check("inference.top_p=0.9")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert 'learner: importance_sampling with collection.answers = "choice" and inference.top_p = 0.9' in refused.stderr
    accepted = check()  # the example samples at top_p 1
    assert accepted.returncode == 0, accepted.stderr
