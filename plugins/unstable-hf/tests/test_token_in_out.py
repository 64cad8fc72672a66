"""Token in, token out across whole games with a real chat template: with the ChatML folder shaped
like Qwen2.5-Instruct (``real_shaped.py``) and the ``chat`` template, every sequence the learner
trains on is made of the ids the hf backend served, prompt ids then completion ids, never the text
tokenised again; in both answer modes (``collection.answers = "free"`` and ``"choice"``, where a
step's rows are the prompt ids, then each offered answer's ids as the backend scored them:
``unstable_core.expand_choices``)."""

import pytest

import unstable_core

pytest.importorskip("unstable_reinforce")
pytest.importorskip("unstable_openspiel")
pytest.importorskip("pyspiel")


@pytest.fixture
def recorded(monkeypatch):
    """What the hf backend answered (every Completion) and what the learner packed to forward
    (every ``Sequence``), for one run in this process (sync)."""
    from unstable_hf import inference, training

    served, trained = [], []
    generate, choose, sequences = inference.HFInference.generate_batch, inference.HFInference.choose_batch, training.sequences

    def generate_batch(self, requests):
        out = generate(self, requests)
        served.extend(c for r, c in zip(requests, out, strict=True) if r.choices is None)
        return out

    def choose_batch(self, requests):
        out = choose(self, requests)
        served.extend(out)
        return out

    def packed(steps, max_train_len=None):
        out = sequences(steps, max_train_len)
        trained.extend(out)
        return out

    monkeypatch.setattr(inference.HFInference, "generate_batch", generate_batch)
    monkeypatch.setattr(inference.HFInference, "choose_batch", choose_batch)
    monkeypatch.setattr(training, "sequences", packed)
    return served, trained


def run(folder, run_dir, answers):
    lora = {"rank": 4, "alpha": 8}
    cfg = {
        "name": "token-in-out", "seed": 3,
        "train_envs": [{"env_id": "openspiel/kuhn_poker", "num_players": 2, "num_actors": 1, "template": "chat"}],
        "opponents": ["random-valid"], "model": {"model": folder}, "model_sampler": {"name": "mirror"},
        "inference": {"name": "hf", "device": "cpu", "max_tokens": 12, "batch_wait_ms": 5, "lora": lora},
        "learner": {"name": "reinforce", "device": "cpu", "lr": 1e-3, "mini_batch_size": 64, "max_generation_len": 12, "lora": lora},
        "training": {"learning_steps": 2, "batch_size": 6, "save_every": 1, "eval_every": 0, "filter_zero_advantage": False},
        "collection": {"mode": "sync", "num_train_games": 3, "eval_games": 0, "answers": answers},
        "trackers": [{"name": "jsonl"}],
    }
    result = unstable_core.run(cfg, run_dir=run_dir)
    assert result.status == "completed" and result.learner_steps == 2


@pytest.mark.parametrize("answers", ["free", "choice"])
def test_the_learner_trains_on_the_ids_the_backend_served(shaped_folder, tmp_path, recorded, answers):
    from transformers import AutoTokenizer

    folder = shaped_folder("qwen2.5")
    served, trained = recorded
    run(folder, tmp_path / "run", answers)
    tok = AutoTokenizer.from_pretrained(folder)
    assert served and trained
    # the prompts are the folder's chat template (ChatML, its default system message), tokenised by the backend
    for c in served:
        text = tok.decode(c.prompt_token_ids)
        assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"), text
        assert text.endswith("<|im_end|>\n<|im_start|>assistant\n"), text
    if answers == "free":
        made = {tuple(c.prompt_token_ids + c.completion_token_ids) for c in served}
        # random completions: their text tokenised again gives other ids (a re-tokenising learner would differ)
        assert any(tok(c.text, add_special_tokens=False)["input_ids"] != c.completion_token_ids for c in served)
    else:  # a row per offered answer: the prompt ids, then the answer's ids as the backend wrote and scored them
        made = {tuple(c.prompt_token_ids + ids[:n]) for c in served for ids in c.choice_token_ids for n in range(1, len(ids) + 1)}
        assert all(c.completion_token_ids in c.choice_token_ids and len(c.choice_token_ids) == 2 for c in served)
        assert all(c.completion_token_ids[-1] == tok.eos_token_id for c in served)
    for s in trained:
        assert s.completion and tuple(s.prompt + s.completion) in made, tok.decode(s.prompt + s.completion)
    if answers == "free":  # every sequence trained on is a whole served one
        assert {tuple(s.prompt + s.completion) for s in trained} <= made
    else:  # each chosen row carries the logprobs the backend reported for its tokens
        chosen = [s for s in trained if s.rollout_logprobs]
        assert chosen
        for s in chosen:
            ids = s.prompt + s.completion
            assert any(ids == (c.prompt_token_ids + c.completion_token_ids)[: len(ids)]
                       and s.rollout_logprobs == c.logprobs[len(s.prompt) - len(c.prompt_token_ids) :][: len(s.completion)]
                       for c in served)
