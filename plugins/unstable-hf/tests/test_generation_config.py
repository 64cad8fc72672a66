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
from unstable_hf.testing import MATRIX as MATRIX_MARKS
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


#: the sampling = scoring matrix (docs/logprobs.md): model folder x sampling options (and a batch
#: mixing adapters); the fast slice (unmarked) is the tiny folder at two of them, the rest is a cell
#: of the consistency matrix (``pytest -m matrix``, run with ``UNSTABLE_MATRIX=1``)
FOLDERS = ["tiny", "qwen2.5", "gemma2"]
OPTIONS = [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.7, 0.9)]
FAST = {("tiny", 1.0, 1.0), ("tiny", 0.7, 0.9)}
MATRIX = [pytest.param(f, t, p, id=f"{f}-t{t}-p{p}", marks=() if (f, t, p) in FAST else MATRIX_MARKS)
          for f in FOLDERS for t, p in OPTIONS]
LORA = {"rank": 4, "alpha": 8, "modules_to_save": ["model.norm"]}


@pytest.fixture(scope="module")
def folders(folder, shaped_folder):
    """Each folder of the matrix: the tiny one with a real folder's sampling fields; Qwen2.5-shaped
    (its generation_config.json: temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05);
    Gemma-2-shaped (final_logit_softcapping = 30, two end ids)."""
    return {"tiny": folder, "qwen2.5": shaped_folder("qwen2.5"), "gemma2": shaped_folder("gemma2")}


def scored_by_learner(path, temperature, outs, refs):
    """Each completion token's logprob under the learner's policy at the served weights: the base
    model, or each ref's adapter loaded into the learner's own."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    learner = ScoresOnly(LearnerOptions(device="cpu", temperature=temperature, lora=LORA), path, seed=0)
    found: dict[int, list[float]] = {}
    for ref in {r.uid: r for r in refs}.values():
        rows = [i for i, r in enumerate(refs) if r.uid == ref.uid]
        packed = pack([Sequence(outs[i].prompt_token_ids, outs[i].completion_token_ids, []) for i in rows], learner.device)
        with torch.no_grad():
            if ref.adapter_path:
                set_peft_model_state_dict(learner.model, load_peft_weights(ref.adapter_path))
                logp = learner.policy.completion_logprobs(packed).tolist()
            else:  # the base model (adapters off)
                logp = learner.policy.completion_logprobs(packed, adapter=False).tolist()
        for i in rows:
            n = len(outs[i].completion_token_ids)
            found[i], logp = logp[:n], logp[n:]
    return [lp for i in range(len(outs)) for lp in found[i]]


def scored_exactly(b, path, outs, refs, temperature, top_p):
    """Each completion token's logprob from the exact scorer (what completion_probabilities
    multiplies) on the served model, each row under its ref's adapter."""
    import contextlib

    from unstable_hf.mixed_adapters import BASE, mixed

    model = b._bases[path]
    found: dict[int, list[float]] = {}
    for ref in {r.uid: r for r in refs}.values():
        rows = [i for i, r in enumerate(refs) if r.uid == ref.uid]
        if b._mixes_adapters(path):
            serving = mixed(model, [b._resident(model, ref) or BASE] * len(rows))
        else:
            serving = model.disable_adapter() if b._activate(model, ref) is None else contextlib.nullcontext()
        with serving:
            pairs = [(outs[i].prompt_token_ids, outs[i].completion_token_ids) for i in rows]
            for i, (lps, _) in zip(rows, target_logprobs(model, pairs, b.tokenizer.pad_token_id, temperature, top_p), strict=True):
                found[i] = lps
    return [lp for i in range(len(outs)) for lp in found[i]]


def sampling_equals_scoring(path, refs, temperature, top_p, seeds=3):
    """Serve every (prompt, ref) in one batch; the largest gaps of the reported logprobs to the
    learner's and the exact scorer's, and the reported ones."""
    b = HFInference(HFInferenceOptions(device="cpu", max_tokens=12, temperature=temperature, top_p=top_p, lora=LORA))
    requests = [GenerationRequest(model=refs[(i + s) % len(refs)], prompt=p, seed=s) for s in range(seeds) for i, p in enumerate(PROMPTS)]
    outs = b.generate_batch(requests)
    served = [r.model for r in requests]
    reported = [lp for o in outs for lp in o.logprobs]
    learned = scored_by_learner(path, temperature, outs, served)
    scored = scored_exactly(b, path, outs, served, temperature, top_p)
    assert len(reported) == len(learned) == len(scored) > len(requests)
    gap_learner = max(abs(a - c) for a, c in zip(reported, learned, strict=True))
    gap_scorer = max(abs(a - c) for a, c in zip(reported, scored, strict=True))
    return gap_learner, gap_scorer, reported, b


@pytest.mark.parametrize("name,temperature,top_p", MATRIX)
def test_sampled_logprobs_equal_the_learners_and_the_scorers_despite_the_folders_sampling_fields(folders, name, temperature, top_p):
    path = folders[name]
    ref = ModelRef(uid="base", kind="base", backend="hf", model=path)
    gap_learner, gap_scorer, reported, _ = sampling_equals_scoring(path, [ref], temperature, top_p)
    assert gap_learner <= 1e-4 and gap_scorer <= 1e-4, (gap_learner, gap_scorer)
    # every drawn token lies in the run's nucleus (not the folder's top_k = 5 only): some outside it when top_p = 1
    if name == "tiny" and top_p == 1.0:
        assert any(lp < -2.5 for lp in reported)  # far less likely than a top-5 token of this near-uniform model could be


@pytest.mark.parametrize("name", [pytest.param(f, marks=MATRIX_MARKS) for f in FOLDERS])
def test_a_batch_mixing_adapters_reports_each_adapters_logprobs(folders, name, tmp_path):
    """The base model and two checkpoints (random LoRA weights, their own final norm gains) served
    in one batch, at temperature 0.7 and top_p 0.9: each row's logprobs are its own adapter's."""
    from unstable_hf.testing import random_lora_adapter

    path = folders[name]
    refs = [ModelRef(uid="base", kind="base", backend="hf", model=path)]
    for i, gain in enumerate((0.5, 2.0)):
        adapter = random_lora_adapter(path, tmp_path / f"a{i}", seed=20 + i, modules_to_save=["model.norm"], norm_scale=gain, scale=0.2)
        refs.append(ModelRef(uid=f"ckpt-{i}", kind="checkpoint", backend="hf", model=path, adapter_path=adapter, version=i + 1))
    gap_learner, gap_scorer, _, b = sampling_equals_scoring(path, refs, 0.7, 0.9)
    assert gap_learner <= 1e-4 and gap_scorer <= 1e-4, (gap_learner, gap_scorer)
    assert b.batches == [len(PROMPTS) * 3]  # one batch (one generate call where the model mixes adapters)


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
