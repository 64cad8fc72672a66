"""Folders shaped like real checkpoints (``real_shaped.py``): the real Qwen vocabulary, the chat
templates, generation_config.json, bfloat16 weights on disk, loading and generating through the hf
backend; and Gemma-2's final logit softcap in the learner's logprobs."""

import asyncio
import functools
import json
from pathlib import Path

import pytest
import torch

from unstable_core import GenerationRequest, ModelRef
from unstable_hf.inference import HFInference, HFInferenceOptions
from unstable_hf.logprobs import naive_token_logprobs
from unstable_hf.options import LearnerOptions
from unstable_hf.training import LoraLearner

torch.set_num_threads(1)

CONVERSATION = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>why</think>\n\nHello"},
                {"role": "user", "content": "Again"}]


@functools.cache
def tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def safetensors_dtypes(path):
    """The dtypes written in model.safetensors' header, read without torch."""
    raw = (Path(path) / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


def test_the_qwen_folder_has_qwens_vocabulary_template_generation_config_and_bf16_weights(shaped_folder):
    from transformers import AutoConfig, GenerationConfig

    path = shaped_folder("qwen2.5")
    tok = tokenizer(path)
    # Qwen's own ids (as Qwen2.5's tokenizer gives them): the 151,643 BPE ranks, then its special tokens
    assert tok("Hello world!", add_special_tokens=False)["input_ids"] == [9707, 1879, 0]
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|file_sep|>"]) == [151643, 151644, 151645, 151664]
    assert len(tok) == 151665 and tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    text = "Kuhn poker: you hold the King. \\boxed{[bet]} 你好"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tok.apply_chat_template([{"role": "system", "content": "S"}] + CONVERSATION[:1], tokenize=False).startswith(
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n")
    gen = json.loads((Path(path) / "generation_config.json").read_text())
    assert {k: gen[k] for k in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample", "eos_token_id", "pad_token_id")} == {
        "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "do_sample": True,
        "eos_token_id": [151645, 151643], "pad_token_id": 151643}
    assert GenerationConfig.from_pretrained(path).repetition_penalty == 1.05
    config = AutoConfig.from_pretrained(path)
    assert config.model_type == "qwen2" and config.dtype == torch.bfloat16 and config.tie_word_embeddings
    assert config.vocab_size == 151936 > len(tok)  # padded past the tokenizer, as the real config is
    assert safetensors_dtypes(path) == {"BF16"}
    assert (Path(path) / "model.safetensors").stat().st_size < 12 * 2**20


def test_the_qwen3_folder_has_the_think_tokens_and_qwen3s_template(shaped_folder):
    from transformers import AutoConfig, GenerationConfig

    path = shaped_folder("qwen3")
    tok = tokenizer(path)
    assert tok.convert_tokens_to_ids(["<think>", "</think>"]) == [151667, 151668] and len(tok) == 151669
    # the reasoning of an earlier assistant turn is dropped, as Qwen3's template drops it
    assert tok.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True, enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    gen = GenerationConfig.from_pretrained(path)
    assert (gen.temperature, gen.top_p, gen.top_k, gen.do_sample) == (0.6, 0.95, 20, True)
    assert AutoConfig.from_pretrained(path).model_type == "qwen3" and safetensors_dtypes(path) == {"BF16"}


def test_the_gemma2_folder_softcaps_and_speaks_gemmas_turns(shaped_folder):
    from transformers import AutoConfig, GenerationConfig

    path = shaped_folder("gemma2")
    tok = tokenizer(path)
    config = AutoConfig.from_pretrained(path)
    assert config.model_type == "gemma2" and config.final_logit_softcapping == 30.0 and config.attn_logit_softcapping == 50.0
    assert tok.convert_tokens_to_ids(["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]) == [0, 1, 2, 4, 5]
    assert tok("Hi")["input_ids"][0] == 2  # the tokenizer adds <bos>, as Gemma's does
    assert tok.apply_chat_template([{"role": "system", "content": "S"}] + CONVERSATION[:1], tokenize=False, add_generation_prompt=True) == (
        "<bos><start_of_turn>user\nS\n\nHi<end_of_turn>\n<start_of_turn>model\n")
    assert tok.eos_token == "<eos>" and GenerationConfig.from_pretrained(path).eos_token_id == [1, 5]
    assert safetensors_dtypes(path) == {"BF16"}


@pytest.mark.parametrize("shape", ["qwen2.5", "gemma2"])
def test_the_hf_backend_loads_the_folder_and_generates_from_its_chat_template(shaped_folder, shape):
    path = shaped_folder(shape)
    tok = tokenizer(path)
    backend = HFInference(HFInferenceOptions(device="cpu", max_tokens=5))
    prompt = tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True)
    out = asyncio.run(backend.generate(GenerationRequest(model=ModelRef(uid="m", backend="hf", model=path), prompt=prompt, seed=1)))
    assert out.prompt_token_ids == tok(prompt, add_special_tokens=False)["input_ids"]
    ids = out.completion_token_ids
    assert 1 <= len(ids) <= 5 and len(out.logprobs) == len(ids) and all(lp <= 0 for lp in out.logprobs)
    assert out.text == tok.decode([t for t in ids if t != tok.eos_token_id], skip_special_tokens=True)


class Scores(LoraLearner):
    def loss(self, steps, batch_size):  # pragma: no cover (never trained here)
        raise NotImplementedError


@pytest.mark.parametrize(("dtype", "tolerance"), [("float64", 1e-10), ("float32", 1e-4)])
def test_learner_logprobs_apply_gemma2s_final_logit_softcap(shaped_folder, dtype, tolerance):
    """The learner's completion logprobs equal log_softmax of transformers' own forward, which
    applies ``final_logit_softcapping`` (the learner computes its logits from the hidden states).
    In float32 the two sum 151,648 exponentials in different orders: about 1e-5 apart."""
    from unstable_core import Step, Turn

    path = shaped_folder("gemma2")
    learner = Scores(LearnerOptions(device="cpu", dtype=dtype, lora={"rank": 4, "alpha": 8}), path, seed=0)
    tok = tokenizer(path)
    prompt = tok(tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True), add_special_tokens=False)["input_ids"]
    completion = tok("\\boxed{[bet]} because the King wins", add_special_tokens=False)["input_ids"] + [tok.convert_tokens_to_ids("<end_of_turn>")]
    turn = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=prompt, completion="c", completion_token_ids=completion,
                logprobs=[], action="[bet]", format_ok=True)
    step = Step(env_id="E", game_idx=0, player_id=0, turn_index=0, num_turns=1, turn=turn, final_reward=1.0, reward=1.0)
    with torch.no_grad():
        mine = learner.policy.completion_logprobs(learner.pack([step]))
        logits = learner.model(input_ids=torch.tensor([prompt + completion])).logits[0]
        hidden = learner.policy.hidden_states(learner.pack([step]))[0]
    reference = torch.log_softmax(logits, -1)[torch.arange(len(prompt) - 1, len(prompt) + len(completion) - 1), completion]
    assert (mine - reference).abs().max() <= tolerance
    positions = torch.arange(len(prompt) - 1, len(prompt) + len(completion) - 1)
    uncapped = naive_token_logprobs(hidden[positions], learner.policy.head.weight, torch.tensor(completion))
    assert (uncapped - reference).abs().max() > 1e-2  # the softcap matters on this folder


def test_models_init_shaped_cli(tmp_path, capsys):
    from unstable_core.cli import main

    main(["models", "init-shaped", str(tmp_path / "g"), "--shape", "gemma2", "--hidden", "16", "--seed", "3"])
    config = json.loads((tmp_path / "g" / "config.json").read_text())
    assert config["final_logit_softcapping"] == 30.0 and config["hidden_size"] == 16
    assert json.loads((tmp_path / "g" / "unstable_shaped.json").read_text())["spec"]["seed"] == 3
    with pytest.raises(SystemExit) as bad:
        main(["models", "init-shaped", str(tmp_path / "x"), "--shape", "llama"])
    assert bad.value.code == 2 and "--shape" in capsys.readouterr().err and not (tmp_path / "x").exists()
