import asyncio
import filecmp
import json
import os
import warnings

import pytest
import torch

import unstable_hf.plugin as plugin
from unstable_core import Checkpoint, GenerationRequest, ModelRef
from unstable_core.testing import InferenceContract
from unstable_hf.inference import HFInference, HFInferenceOptions
from unstable_hf.testing import random_lora_adapter
from unstable_hf.tiny import TinySpec, build_tiny

torch.set_num_threads(1)


def backend(**kw):
    return HFInference(HFInferenceOptions(**{"device": "cpu", "max_tokens": 6, "lora": {"rank": 4, "alpha": 8}, **kw}))


class TestHFConformance(InferenceContract):
    plugin = plugin
    name = "hf"
    options = {"device": "cpu", "max_tokens": 4}

    @pytest.fixture
    def component(self, spec, tiny_path):
        self.model = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
        return spec.factory(spec.config.model_validate(dict(self.options)), None)


def test_tiny_spec_parse():
    s = TinySpec.parse("tiny:KuhnPoker-v0-train,TicTacToe-v0-train?seed=3&sft_steps=0")
    assert s.env_ids == ("KuhnPoker-v0-train", "TicTacToe-v0-train") and s.seed == 3 and s.sft_steps == 0
    assert TinySpec.parse("tiny").env_ids == ("KuhnPoker-v0-train",)
    for bad in ("tinyx", "tiny?nope=1", "tiny?seed=abc"):
        with pytest.raises(ValueError):
            TinySpec.parse(bad)
    with pytest.raises(ValueError, match=r"sft_opponent: String should have at least 1 character"):
        TinySpec.parse("tiny?sft_opponent=")  # the key is named, not only "1 validation error"


def test_an_unknown_warm_start_agent_is_named_before_anything_is_built(tmp_path):
    for key in ("sft_agent", "sft_opponent"):
        spec = TinySpec.parse(f"tiny?{key}=randm-valid")
        with pytest.raises(ValueError, match=rf"tiny model: {key}: unknown scripted agent 'randm-valid'. Did you mean 'random-valid'"):
            build_tiny(spec, tmp_path / key)
        assert not (tmp_path / key).exists()


def test_tiny_build_is_deterministic_and_loads_with_from_pretrained(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = TinySpec.parse("tiny?sft_steps=3&corpus_games=10&hidden=64&heads=2&kv_heads=1&intermediate=64&vocab_size=400")
    a, b = build_tiny(spec, tmp_path / "a"), build_tiny(spec, tmp_path / "b")
    for name in ("model.safetensors", "tokenizer.json"):
        assert filecmp.cmp(a / name, b / name, shallow=False), name
    model = AutoModelForCausalLM.from_pretrained(a)
    tok = AutoTokenizer.from_pretrained(a)
    assert model.config.head_dim >= 32 and model.config.model_type == "qwen3"
    assert model.config.vocab_size == len(tok)
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok("<|im_start|>user", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids)[0] == "<|im_start|>"  # a single special token
    assert json.loads((a / "unstable_tiny.json").read_text())["spec"]["seed"] == 0


def test_warm_start_games_against_an_opponent_imitate_one_agent_on_many_boards():
    import re

    from unstable_hf.tiny import scripted_games

    spec = TinySpec.parse("tiny:TicTacToe-v0-train?sft_agent=first-valid&sft_opponent=random-valid")
    assert spec.key() != TinySpec.parse("tiny:TicTacToe-v0-train?sft_agent=first-valid").key()
    pairs = scripted_games(spec, 20, seed=1, opponent=spec.sft_opponent)
    alone = scripted_games(spec, 20, seed=1)
    assert pairs
    seats = set()
    for prompt, [completion], _ in pairs:
        seats.add(re.search(r"You are Player (\d)", prompt).group(1))
        free = re.findall(r"'\[(\d)\]'", prompt.split("Available Moves:")[-1])
        assert completion == "\\boxed{[" + free[0] + "]}"  # first-valid's move: random-valid's are not kept
    assert seats == {"0", "1"}  # the imitated agent sits in both seats
    boards = {p.split("Current Board:")[-1] for p, _, _ in pairs}
    assert len(boards) > 3 * len({p.split("Current Board:")[-1] for p, _, _ in alone})  # random-valid varies the games


def test_all_valid_targets_are_every_available_move_of_each_imitated_position():
    import re

    from unstable_hf.tiny import scripted_games

    spec = TinySpec.parse("tiny:TicTacToe-v0-train?sft_targets=all-valid")
    assert spec.key() != TinySpec.parse("tiny:TicTacToe-v0-train").key()
    assert TinySpec.parse("tiny?sft_targets=agent").key() == TinySpec.parse("tiny").key()  # earlier caches stay valid
    with pytest.raises(ValueError, match=r"sft_targets: Input should be 'agent', 'all-valid' or 'policy'"):
        TinySpec.parse("tiny?sft_targets=all")
    pairs = scripted_games(spec, 10, seed=1, targets="all-valid")
    assert [p for p, _, _ in pairs] == [p for p, _, _ in scripted_games(spec, 10, seed=1)]  # the same games
    sizes = set()
    for prompt, completions, weights in pairs:
        free = re.findall(r"'\[(\d)\]'", prompt.split("Available Moves:")[-1])
        assert completions == ["\\boxed{[" + cell + "]}" for cell in free]
        assert weights is None  # evenly
        sizes.add(len(completions))
    assert max(sizes) == 9 and min(sizes) < 6


def test_policy_targets_weigh_each_valid_move_by_the_agent_mixed_with_even_weights(monkeypatch, make_plugin_system):
    from unstable_hf.tiny import scripted_games

    spec = TinySpec.parse("tiny:TicTacToe-v0-train?sft_agent=first-valid&sft_targets=policy&sft_mix=0.2")
    assert spec.key() != TinySpec.parse("tiny:TicTacToe-v0-train?sft_agent=first-valid&sft_targets=policy").key()
    assert TinySpec.parse("tiny?sft_mix=1").key() == TinySpec.parse("tiny").key()  # earlier caches stay valid
    with pytest.raises(ValueError, match=r"sft_mix: Input should be less than or equal to 1"):
        TinySpec.parse("tiny?sft_targets=policy&sft_mix=1.5")
    with pytest.raises(ValueError, match=r"sft_mix .* needs sft_targets=policy"):
        TinySpec.parse("tiny?sft_mix=0.5")
    import unstable_core
    from unstable_core.testing import toy_plugin

    monkeypatch.setattr(unstable_core, "get_plugin_system", lambda: make_plugin_system(toy_plugin))
    with pytest.raises(ValueError, match=r"sft_targets: 'policy' .* 'tabular' scores no completions"):
        TinySpec.parse("tiny?sft_targets=policy&sft_backend=tabular&sft_agent=a").check_agents()
    pairs = scripted_games(spec, 6, seed=1, targets="policy")
    assert [p for p, _, _ in pairs] == [p for p, _, _ in scripted_games(spec, 6, seed=1)]  # the same games
    for _, completions, weights in pairs:
        n = len(completions)
        assert n > 1 and weights is not None and sum(weights) == pytest.approx(1.0)
        # first-valid always answers the first free cell: it gets its share and the even part, the rest the even part
        assert weights == pytest.approx([0.2 + 0.8 / n] + [0.8 / n] * (n - 1))


def _probabilities(model, tok, prompt, answers):
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    out = []
    for answer in answers:
        completion = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([ids + completion])).logits[0, len(ids) - 1 : -1], -1)
        out.append(float(logprobs.gather(1, torch.tensor(completion)[:, None]).sum().exp()))
    return out


def test_a_warm_start_on_several_answers_learns_their_mixture_and_on_one_answer_that_answer():
    from unstable_hf.tiny import build_model, supervised_warm_start, train_tokenizer

    spec = TinySpec.parse("tiny?sft_steps=60&sft_batch=2&sft_lr=5e-3&hidden=64&heads=2&kv_heads=1&intermediate=64&vocab_size=400")
    prompts = [f"<|im_start|>user\nBoard {b}: pick a cell<|im_end|>\n<|im_start|>assistant\n" for b in ("A A A A A A", "B B B B B B")]
    answers = ["\\boxed{[1]}", "\\boxed{[7]}", "\\boxed{[4]}"]
    tok = train_tokenizer(prompts + answers, spec.vocab_size)
    mixture = build_model(spec, tok)
    losses = supervised_warm_start(mixture, tok, [(prompts[0], answers[:2], None), (prompts[1], answers[1:], [0.2, 0.8])], spec)
    single = build_model(spec, tok)
    supervised_warm_start(single, tok, [(prompts[0], answers[:1], None), (prompts[1], answers[2:], None)], spec)
    p1, p7, p4 = _probabilities(mixture, tok, prompts[0], answers)
    assert 0.35 < p1 < 0.65 and 0.35 < p7 < 0.65 and p4 < 0.05, (p1, p7, p4)  # half each, the other prompt's answer not
    q7, q4 = _probabilities(mixture, tok, prompts[1], answers[1:])
    assert 0.05 < q7 < 0.35 and 0.65 < q4 < 0.95, (q7, q4)  # by the weights given
    assert _probabilities(single, tok, prompts[0], answers[:1])[0] > 0.9
    assert losses[-1] < losses[0]


def test_completion_carries_ids_logprobs_and_version(tiny_path):
    b = backend(max_tokens=5)
    ref = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path, version=0)
    out = asyncio.run(b.generate(GenerationRequest(model=ref, prompt="Your card is: 'K'", seed=1)))
    assert out.prompt_token_ids == b.tokenizer("Your card is: 'K'", add_special_tokens=False)["input_ids"]
    assert 1 <= len(out.completion_token_ids) == len(out.logprobs) <= 5
    assert all(lp <= 0 for lp in out.logprobs)
    # the returned logprobs are the model's own: recompute with a forward pass
    ids = torch.tensor([out.prompt_token_ids + out.completion_token_ids])
    with torch.no_grad(), b._bases[tiny_path].disable_adapter():
        logits = b._bases[tiny_path](input_ids=ids).logits[0]
    logp = torch.log_softmax(logits.float(), -1)
    p = len(out.prompt_token_ids)
    expected = [float(logp[p - 1 + j, t]) for j, t in enumerate(out.completion_token_ids)]
    assert out.logprobs == pytest.approx(expected, abs=1e-4)


def test_a_completion_cut_at_max_tokens_is_truncated(tiny_path):
    """``truncated``: the completion hit max_tokens instead of ending with the end token. The
    untrained fast model never ends on its own, so the end token is made the one it samples first."""
    ref = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path, version=0)
    request = GenerationRequest(model=ref, prompt="Your card is: 'K'", seed=5)
    b = backend(max_tokens=3)
    cut = asyncio.run(b.generate(request))
    assert cut.truncated and len(cut.completion_token_ids) == 3 and b.tokenizer.eos_token_id not in cut.completion_token_ids
    b = backend(max_tokens=3)
    asyncio.run(b.generate(request.model_copy(update={"seed": 6})))  # loads the model and its tokenizer
    b.tokenizer.eos_token = b.tokenizer.convert_ids_to_tokens(cut.completion_token_ids[0])
    ended = asyncio.run(b.generate(request))  # same seed: the same first token, now the end token
    assert ended.completion_token_ids == cut.completion_token_ids[:1] and not ended.truncated


def test_requests_in_flight_are_batched(tiny_path):
    b = backend(batch_wait_ms=50)
    ref = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)

    async def many():
        return await asyncio.gather(*(b.generate(GenerationRequest(model=ref, prompt=f"game {i}", seed=i)) for i in range(16)))

    outs = asyncio.run(many())
    assert len(outs) == 16 and max(b.batches) > 1 and sum(b.batches) == 16


def test_an_adapter_with_a_trained_final_norm_is_served_with_it(tiny_path, tmp_path):
    """``lora.modules_to_save = ["model.norm"]``: the checkpoint carries the final RMSNorm gain and
    the backend generates with it; an adapter with the same LoRA weights but no saved norm, and the
    base model, keep the base gain (the logprobs are recomputed with peft's own loading)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    with_norm = random_lora_adapter(tiny_path, tmp_path / "norm", 0, modules_to_save=["model.norm"], norm_scale=3.0)
    without = random_lora_adapter(tiny_path, tmp_path / "plain", 0)
    saved = json.loads((tmp_path / "norm" / "adapter_config.json").read_text())["modules_to_save"]
    assert saved == ["model.norm"]
    b = backend(max_tokens=4)
    refs = {name: ModelRef(uid=name, kind="checkpoint", backend="hf", model=tiny_path, adapter_path=path, version=1)
            for name, path in (("norm", with_norm), ("plain", without))}
    refs["base"] = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
    outs = {name: asyncio.run(b.generate(GenerationRequest(model=ref, prompt="Your card is: 'K'", seed=3)))
            for name, ref in refs.items()}
    for name, path in (("norm", with_norm), ("plain", without), ("base", None)):
        model = AutoModelForCausalLM.from_pretrained(tiny_path)
        model = PeftModel.from_pretrained(model, path) if path else model
        out = outs[name]
        ids = torch.tensor([out.prompt_token_ids + out.completion_token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        p = len(out.prompt_token_ids)
        assert out.logprobs == pytest.approx([float(logp[p - 1 + j, t]) for j, t in enumerate(out.completion_token_ids)], abs=1e-4)
    # the gain made a difference: three times the gain sharpens the same LoRA's distribution
    assert outs["norm"].logprobs[0] != pytest.approx(outs["plain"].logprobs[0], abs=1e-3)


def test_adapters(tiny_path, tmp_path):
    b = backend(max_loras=2, max_tokens=3)
    paths = [random_lora_adapter(tiny_path, tmp_path / f"a{i}", i) for i in range(3)]
    refs = [ModelRef(uid=f"ckpt-{i}", kind="checkpoint", backend="hf", model=tiny_path, adapter_path=p, version=i + 1) for i, p in enumerate(paths)]
    base = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
    for r in refs[:2]:
        b.load_checkpoint(Checkpoint(uid=r.uid, version=r.version, path=r.adapter_path))
        out = asyncio.run(b.generate(GenerationRequest(model=r, prompt="hello", seed=0)))
        assert out.policy_version == r.version
    assert list(b._adapters) == ["ckpt-0", "ckpt-1"]
    model = b._bases[tiny_path]
    asyncio.run(b.generate(GenerationRequest(model=refs[2], prompt="hello", seed=0)))
    assert list(b._adapters) == ["ckpt-1", "ckpt-2"]  # least recently used evicted
    assert "ckpt-0" not in model.peft_config
    # different adapters give different logprobs for the same prompt; the base model differs too
    lps = [asyncio.run(b.generate(GenerationRequest(model=r, prompt="hello", seed=0))).logprobs[0] for r in (refs[1], refs[2], base)]
    assert len(set(round(x, 6) for x in lps)) == 3
    assert len(b._bases) == 1  # never reloaded


def test_evicting_the_active_adapter_is_quiet(tiny_path, tmp_path):
    """Evicting the adapter peft has active is routine (max_loras 1: every load evicts it; one call
    per adapter activates it): peft's warning about it ("... was active which is now deleted") would
    fill the console of a run."""
    b = backend(max_loras=1, max_tokens=3, mixed_adapters=False)
    refs = [ModelRef(uid=f"ckpt-{i}", kind="checkpoint", backend="hf", model=tiny_path, version=i + 1,
                     adapter_path=random_lora_adapter(tiny_path, tmp_path / f"a{i}", i)) for i in range(2)]
    first = asyncio.run(b.generate(GenerationRequest(model=refs[0], prompt="hello", seed=0)))
    assert b._bases[tiny_path].active_adapters == ["ckpt-0"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(b.generate(GenerationRequest(model=refs[1], prompt="hello", seed=0)))
        again = asyncio.run(b.generate(GenerationRequest(model=refs[0], prompt="hello", seed=0)))
    assert list(b._adapters) == ["ckpt-0"]
    assert again.logprobs == pytest.approx(first.logprobs, abs=1e-6)  # reloaded, the same adapter


def test_models_init_tiny_cli(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "tiny"
    proc = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "models", "init-tiny", str(out),
                           "--spec", "tiny?sft_steps=0&corpus_games=5&hidden=64&heads=2&kv_heads=1&intermediate=64&vocab_size=350"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    bad = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "models", "init-tiny", str(out), "--spec", "tiny?x=1"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown key" in bad.stderr and "Traceback" not in bad.stderr
    unwritable = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "models", "init-tiny",
                                 "/proc/tiny-here"], capture_output=True, text=True)
    assert unwritable.returncode == 2 and "/proc/tiny-here" in unwritable.stderr and "Traceback" not in unwritable.stderr


def test_tiny_shorthand_resolves_to_cached_build(tmp_path):
    from unstable_hf.loading import resolve_model_path
    from unstable_hf.options import ModelLoadOptions

    opts = ModelLoadOptions(cache_dir=str(tmp_path))
    spec = "tiny?sft_steps=0&corpus_games=5&hidden=64&heads=2&kv_heads=1&intermediate=64&vocab_size=350"
    p1 = resolve_model_path(spec, opts)
    mtime = os.path.getmtime(os.path.join(p1, "model.safetensors"))
    assert resolve_model_path(spec, opts) == p1 and os.path.getmtime(os.path.join(p1, "model.safetensors")) == mtime
    assert resolve_model_path("Qwen/Qwen3-1.7B-Base", opts) == "Qwen/Qwen3-1.7B-Base"


def test_modules_to_save_naming_no_module_fails_naming_the_key(tiny_path):
    """peft skips a ``modules_to_save`` name that matches no module; a typo would train nothing
    extra, silently. It fails instead, naming the key and the model's norms."""
    from transformers import AutoModelForCausalLM

    from unstable_hf.loading import with_lora
    from unstable_hf.options import LoraOptions

    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    with pytest.raises(ValueError, match=r"lora.modules_to_save: 'nope.norm' names no module of the model .*'model.norm'"):
        with_lora(model, LoraOptions(rank=4, alpha=8, modules_to_save=["nope.norm"]))
    wrapped = with_lora(model, LoraOptions(rank=4, alpha=8, modules_to_save=["model.norm"]))
    assert [n for n, p in wrapped.named_parameters() if p.requires_grad and "lora_" not in n] == [
        "base_model.model.model.norm.modules_to_save.default.weight"]


def test_a_bad_tiny_spec_fails_the_model_check_naming_the_key():
    """``config check`` and a run's pre-flight read the tiny spec, so a typo fails before a run
    directory exists, not when the learner builds the model."""
    plugin.check_model(ModelRef(uid="m", backend="hf", model="tiny:TicTacToe-v0-train?sft_targets=all-valid"))
    plugin.check_model(ModelRef(uid="m", backend="hf", model="Qwen/Qwen3-0.6B"))  # a hub id is not read
    with pytest.raises(ValueError, match=r"sft_targets: Input should be 'agent', 'all-valid' or 'policy'"):
        plugin.check_model(ModelRef(uid="m", backend="hf", model="tiny?sft_targets=all"))
    with pytest.raises(ValueError, match=r"tiny model: sft_opponent: unknown scripted agent 'randm-valid'"):
        plugin.check_model(ModelRef(uid="m", backend="hf", model="tiny?sft_opponent=randm-valid"))


def test_no_config_value_runs_a_model_directorys_code_unless_trust_remote_code_is_true(tmp_path):
    """A model folder whose config names its own modeling code (``auto_map``): loading it with
    trust_remote_code off refuses without running it; "yes", 1 or "true" are refused by
    `config check` before anything loads. The code would leave a marker file if it ran."""
    import json
    import os
    import subprocess
    import sys

    from unstable_hf.loading import load_causal_lm
    from unstable_hf.options import ModelLoadOptions

    marker = tmp_path / "code-ran"
    model = tmp_path / "evil"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "evil", "architectures": ["EvilModel"],
        "auto_map": {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"},
    }))
    (model / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    with pytest.raises(ValueError, match="contains custom code"):  # transformers' refusal
        load_causal_lm(str(model), ModelLoadOptions(device="cpu"))
    assert not marker.exists()
    for value in ('"yes"', "1", '"true"'):
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'name = "x"\ntrain_envs = ["KuhnPoker-v0-train"]\nopponents = ["random-valid"]\n'
                       f'[model]\nmodel = "{model}"\n[inference]\nname = "hf"\ntrust_remote_code = {value}\n')
        done = subprocess.run([sys.executable, "-m", "unstable_core.cli", "config", "check", str(cfg)], capture_output=True,
                              text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)
        assert done.returncode == 2 and "inference.trust_remote_code: input should be a valid boolean" in done.stderr, done.stderr
        assert not marker.exists()


def test_a_model_that_cannot_be_loaded_is_a_config_error_before_the_run(tiny_path, tmp_path, monkeypatch):
    """A local folder that is missing or holds no config.json, or a hub id that is not in the
    local cache while the hub is offline: one line at config check, no run directory made."""
    import subprocess
    import sys

    from unstable_hf.loading import model_problem

    (tmp_path / "empty").mkdir()
    assert model_problem(str(tiny_path)) is None
    assert model_problem(str(tmp_path / "nope")) == f"model {str(tmp_path / 'nope')!r}: no such folder"
    assert "has no config.json" in model_problem(str(tmp_path / "empty"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert model_problem("someone/not-cached-model") is None  # online: it is downloaded at the run's start
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # an empty cache
    assert "not in the local Hugging Face cache and the hub is offline" in model_problem("someone/not-cached-model")

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'name = "x"\ntrain_envs = ["KuhnPoker-v0-train"]\nopponents = ["random-valid"]\n'
                   f'[model]\nmodel = "{tmp_path / "nope"}"\n[inference]\nname = "hf"\n')
    for args in (["config", "check", str(cfg)], ["run", str(cfg), "--run-dir", str(tmp_path / "run")]):
        done = subprocess.run([sys.executable, "-m", "unstable_core.cli", *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
        assert "model: model" in done.stderr and "no such folder" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_cuda_device_without_a_gpu_is_refused_with_the_local_executor_only():
    from pydantic import BaseModel

    from unstable_core import ChosenComponents
    from unstable_hf.options import check_device

    class Opts(BaseModel):
        device: str

    local, ray = ChosenComponents({}, executor="local"), ChosenComponents({}, executor="ray")
    for device in ("cpu", "auto"):
        check_device(Opts(device=device), local)
    with pytest.raises(ValueError, match="expected 'cuda' or 'cuda:N'"):
        check_device(Opts(device="cuda:x"), local)
    check_device(Opts(device="cuda:7"), ray)  # the roles may run on GPU machines elsewhere
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda': this machine has no CUDA GPU"):
            check_device(Opts(device="cuda"), local)
    else:
        check_device(Opts(device="cuda"), local)
        with pytest.raises(ValueError, match="CUDA GPU"):
            check_device(Opts(device=f"cuda:{torch.cuda.device_count()}"), local)


def test_a_model_loaded_by_a_second_role_prints_no_second_pair_of_lines(tiny_path, tmp_path, capsys):
    """The rollout role and the learner each load the model: off a terminal its loading lines show
    once (the live dashboard still shows each load)."""
    import shutil

    from unstable_hf.loading import load_causal_lm
    from unstable_hf.options import ModelLoadOptions

    path = str(shutil.copytree(tiny_path, tmp_path / "model"))  # a path no test has loaded yet
    load_causal_lm(path, ModelLoadOptions(device="cpu"))
    first = [line for line in capsys.readouterr().err.splitlines() if path in line]
    assert first == [f"unstable: loading {path} ...", *first[1:]] and len(first) == 2 and "done in" in first[1]
    load_causal_lm(path, ModelLoadOptions(device="cpu"))
    assert [line for line in capsys.readouterr().err.splitlines() if path in line] == []
