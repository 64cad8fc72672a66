"""Generation samples from exactly what the run's options say, whatever the model folder's
``generation_config.json`` carries: real checkpoints ship sampling fields (Qwen2.5-Instruct a
repetition penalty of 1.05-1.1, top_k 20, temperature 0.7) that transformers would otherwise turn
into logits processors run before the backend's own sampler. Each sampled token's reported
logprob equals the learner's and the exact scorer's at equal weights."""

import json
import logging
import shutil

import pytest
import torch

from unstable_core import GenerationRequest, ModelRef
from unstable_hf.inference import HFInference, HFInferenceOptions
from unstable_hf.options import LearnerOptions
from unstable_hf.scoring import target_logprobs
from unstable_hf.training import LoraLearner, Sequence, pack

torch.set_num_threads(1)

#: what a real checkpoint's folder says about sampling, each field a processor transformers builds
FOLDER_SAMPLING = {"do_sample": True, "temperature": 0.7, "top_k": 5, "top_p": 0.8, "repetition_penalty": 1.3,
                   "no_repeat_ngram_size": 2}
PROMPTS = ["Your card is: 'K'. Available moves: '[check]', '[bet]'", "Your card is: 'J'. Available moves: '[check]', '[bet]'",
           "[GAME] You are Player 0 in Kuhn Poker.", "Your card is: 'Q'"]


class ScoresOnly(LoraLearner):
    def loss(self, steps, batch_size):  # pragma: no cover - only its logprobs are used
        raise NotImplementedError


@pytest.fixture(scope="module")
def folder(tiny_path, tmp_path_factory):
    """The fast tiny model, its generation_config.json carrying a real folder's sampling fields."""
    path = tmp_path_factory.mktemp("penalised") / "model"
    shutil.copytree(tiny_path, path)
    config = json.loads((path / "generation_config.json").read_text())
    (path / "generation_config.json").write_text(json.dumps({**config, **FOLDER_SAMPLING}))
    return str(path)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_logprobs_equal_the_learners_and_the_scorers_despite_the_folders_sampling_fields(folder, temperature, top_p):
    b = HFInference(HFInferenceOptions(device="cpu", max_tokens=12, temperature=temperature, top_p=top_p,
                                       lora={"rank": 4, "alpha": 8}))
    ref = ModelRef(uid="base", kind="base", backend="hf", model=folder)
    outs = b.generate_batch([GenerationRequest(model=ref, prompt=p, seed=s) for s in range(3) for p in PROMPTS])
    pairs = [(o.prompt_token_ids, o.completion_token_ids) for o in outs]
    # the learner, fresh adapter (LoRA B zero): the served weights, at the learner's temperature
    learner = ScoresOnly(LearnerOptions(device="cpu", temperature=temperature, lora={"rank": 4, "alpha": 8}), folder, seed=0)
    with torch.no_grad():
        learned = learner.policy.completion_logprobs(pack([Sequence(p, c, []) for p, c in pairs], learner.device)).tolist()
    # the exact scorer (what completion_probabilities multiplies), on the served model
    model = b._bases[folder]
    with model.disable_adapter():
        scored = [lp for lps, _ in target_logprobs(model, pairs, b.tokenizer.pad_token_id, temperature, top_p) for lp in lps]
    reported = [lp for o in outs for lp in o.logprobs]
    assert len(reported) == len(learned) == len(scored) > 3 * len(PROMPTS)
    gap_learner = max(abs(a - c) for a, c in zip(reported, learned, strict=True))
    gap_scorer = max(abs(a - c) for a, c in zip(reported, scored, strict=True))
    assert gap_learner <= 1e-4 and gap_scorer <= 1e-4, (gap_learner, gap_scorer)
    # every drawn token lies in the run's nucleus (not the folder's top_k = 5 only): some outside it when top_p = 1
    if top_p == 1.0:
        assert any(lp < -2.5 for lp in reported)  # far less likely than a top-5 token of this near-uniform model could be


def test_the_folders_sampling_fields_are_named_once_as_not_applied(folder, caplog):
    b = HFInference(HFInferenceOptions(device="cpu", max_tokens=2, temperature=0.9, lora={"rank": 4, "alpha": 8}))
    ref = ModelRef(uid="base", kind="base", backend="hf", model=folder)
    with caplog.at_level(logging.WARNING, logger="unstable.hf"):
        b.generate_batch([GenerationRequest(model=ref, prompt=PROMPTS[0], seed=1)])
        b.generate_batch([GenerationRequest(model=ref, prompt=PROMPTS[1], seed=2)])
    lines = [r.getMessage() for r in caplog.records if "generation_config.json" in r.getMessage()]
    assert len(lines) == 1, lines
    line = lines[0]
    for field in ("repetition_penalty=1.3", "top_k=5", "temperature=0.7", "top_p=0.8", "no_repeat_ngram_size=2"):
        assert field in line, line
    assert "not applied" in line and "temperature = 0.9" in line and "top_p = 1.0" in line, line


def test_a_folder_without_sampling_fields_says_nothing(tiny_path, caplog):
    b = HFInference(HFInferenceOptions(device="cpu", max_tokens=2, lora={"rank": 4, "alpha": 8}))
    with caplog.at_level(logging.WARNING, logger="unstable.hf"):
        b.generate_batch([GenerationRequest(model=ModelRef(uid="base", kind="base", backend="hf", model=tiny_path),
                                            prompt=PROMPTS[0], seed=1)])
    assert not [r for r in caplog.records if "generation_config.json" in r.getMessage()]
