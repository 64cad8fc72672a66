"""Test helpers for plugins built on unstable-hf: a tiny model that builds in seconds, and
``LoraLearnerContract``, the ``LearnerContract`` for learners on the ``unstable_hf.training``
toolkit::

    from unstable_hf.testing import LoraLearnerContract
    import my_algorithm.plugin as plugin

    class TestMyLearner(LoraLearnerContract):
        plugin = plugin
        name = "my-learner"
        options = {**LoraLearnerContract.options, "beta": 0.1}   # the learner's own options

It trains the fast tiny model (built once per test session), serves checkpoints with the ``hf``
backend, and adds a float64 finite-difference check of the learner's loss gradient.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

from unstable_core import ModelRef
from unstable_core.testing import LearnerContract

from . import plugin as hf_plugin

#: no warm start, small corpus: builds in a few seconds on a CPU
FAST_TINY = "tiny:KuhnPoker-v0-train?sft_steps=0&corpus_games=30&hidden=64&heads=2&kv_heads=1&intermediate=128&vocab_size=512"

#: FAST_TINY with a short warm start on KuhnPoker answers (the direction check's bandit; about 20 s)
DIRECTION_TINY = FAST_TINY.replace("sft_steps=0", "sft_steps=60")

_LORA = {"rank": 4, "alpha": 8}


def build_fast_tiny(root: Path, spec: str = FAST_TINY) -> str:
    """Build (or reuse) the tiny model of `spec` under `root`; return its folder."""
    from .tiny import TinySpec, ensure_tiny

    return str(ensure_tiny(TinySpec.parse(spec), Path(root)))


def build_shaped_folder(root: Path, shape: str, **spec: Any) -> str:
    """Build (or reuse) under ``root`` the folder shaped like a real ``shape`` checkpoint
    (``qwen2.5``, ``qwen3`` or ``gemma2``: ``unstable_hf.real_shaped``); return its path."""
    from .real_shaped import ShapedSpec, ensure_shaped

    return str(ensure_shaped(ShapedSpec(shape=shape, **spec), Path(root)))


@pytest.fixture(scope="session")
def shaped_folder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Session fixture: ``shaped_folder("qwen2.5")`` is the path of a random model folder shaped
    like a real Qwen2.5-Instruct one (also ``"qwen3"``, ``"gemma2"``; keyword arguments change the
    ``ShapedSpec``), built once per session. Other test suites take it with
    ``from unstable_hf.testing import shaped_folder`` in their conftest.py."""
    root = tmp_path_factory.mktemp("shaped")
    return functools.partial(build_shaped_folder, root)


def random_lora_adapter(base_path: str, out: Path, seed: int, modules_to_save: tuple[str, ...] | list[str] = (),
                        norm_scale: float = 1.0, rank: int = 4, alpha: float = 8, scale: float = 0.5) -> str:
    """Save, under ``out``, a LoRA adapter (rank 4 by default) of the model at ``base_path`` whose
    weights are drawn from ``seed`` times ``scale`` (not zero: it changes the outputs; a small
    scale keeps the model playing as before); ``modules_to_save`` are saved whole, multiplied by
    ``norm_scale``. Returns the folder."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from .loading import lora_config
    from .options import LoraOptions

    options = LoraOptions(rank=rank, alpha=alpha, modules_to_save=list(modules_to_save))
    m = get_peft_model(AutoModelForCausalLM.from_pretrained(base_path), lora_config(options))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
            elif "modules_to_save" in n:
                p.mul_(norm_scale)
    m.save_pretrained(out)
    return str(out)


def self_play_steps(tokenizer: Any, env_id: str = "KuhnPoker-v0-train", n: int = 64, seed: int = 0,
                    template: str = "qwen3-zs") -> list[Any]:
    """``n`` consecutive steps of whole games of scripted self-play (``random-valid`` in every
    seat, every turn of every player), rendered with ``template`` and tokenized with
    ``tokenizer``: the prompts share what real self-play batches share. Rewards: the game's."""
    import asyncio
    import random

    from unstable_core import EnvSpec, GenerationRequest, Step, Turn, build_component

    provider = build_component("env", "textarena")
    tpl = build_component("template", template)
    agent = build_component("inference", "scripted")
    ref = ModelRef(uid="random-valid", model="random-valid")
    rng = random.Random(seed)
    steps: list[Any] = []
    game_idx = 0
    while len(steps) < n:
        game = provider.make(EnvSpec(env_id=env_id))
        game.reset(num_players=2, seed=rng.getrandbits(31))
        turns: dict[int, list[Turn]] = {0: [], 1: []}
        done = False
        while not done:
            player, obs = game.observe()
            prompt = tpl.render(obs, tokenizer)
            text = asyncio.run(agent.generate(GenerationRequest(model=ref, prompt=prompt, observation=obs, seed=rng.getrandbits(31)))).text
            action, ok = tpl.extract(text)
            turns[player].append(Turn(player_id=player, observation=obs, prompt=prompt, completion=text,
                                      prompt_token_ids=tokenizer(prompt, add_special_tokens=False)["input_ids"],
                                      completion_token_ids=tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id],
                                      action=action, format_ok=ok))
            done, _invalid = game.step(action)
        rewards, _info = game.close()
        for player, ts in turns.items():
            reward = float(rewards.get(player, 0.0))
            steps += [Step(env_id=env_id, game_idx=game_idx, player_id=player, turn_index=i, num_turns=len(ts), turn=t,
                           final_reward=reward, reward=reward) for i, t in enumerate(ts)]
        game_idx += 1
    return steps[:n]


def self_play_batches(tokenizer: Any, batches: int, size: int, seed: int = 0) -> list[Any]:
    """``batches`` consecutive batches of ``size`` steps of ``self_play_steps`` (KuhnPoker),
    the i-th with learner version i."""
    from unstable_core import Batch

    steps = self_play_steps(tokenizer, n=batches * size, seed=seed)
    return [Batch(steps=steps[size * i : size * (i + 1)], learner_version=i) for i in range(batches)]


def trainable_copy(learner: Any) -> dict[str, Any]:
    """A copy of a learner's trainable weights (``trainable()``), to compare after updates."""
    return {name: p.detach().clone() for name, p in learner.trainable().items()}


def max_weight_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest absolute difference between two ``trainable_copy`` results of the same names."""
    assert a.keys() == b.keys(), f"different weights: {sorted(a.keys() ^ b.keys())}"
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@functools.lru_cache(maxsize=2)
def _causal_lm(path: str) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype="float32").eval()


def base_logprobs(path: str, pairs: list[tuple[list[int], list[int]]]) -> list[list[float]]:
    """The logprob of each completion token under the model at ``path`` (temperature 1), for
    (prompt ids, completion ids) pairs."""
    import torch

    model, out = _causal_lm(path), []
    with torch.no_grad():
        for prompt, completion in pairs:
            logits = model(torch.tensor([prompt + completion])).logits[0].float()
            logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
            out.append(logp.gather(1, torch.tensor(completion)[:, None])[:, 0].tolist())
    return out


# -- the consistency matrix: gradients against finite differences, ranks against one learner ----
#: marks of a test of the consistency matrix: ``pytest -m matrix`` selects them, and they run only
#: with ``UNSTABLE_MATRIX=1`` (the whole matrix takes minutes: ``.ci/run`` runs it, the default
#: suite keeps a slice of it unmarked)
MATRIX = (pytest.mark.matrix, pytest.mark.skipif(not os.environ.get("UNSTABLE_MATRIX"),
                                                 reason="the consistency matrix: UNSTABLE_MATRIX=1 pytest -m matrix"))

#: (gradient_checkpointing, prefix_sharing, prefix_layout) a learner's gradient is checked under:
#: padded rows, and prefix-shared rows in each layout, with checkpointing off and on ('segments'
#: gives way to 'masks' under checkpointing: ``LoraLearner.set_prefix_sharing``)
PACKINGS = [(False, False, "masks"), (False, True, "masks"), (False, True, "segments"), (True, False, "masks"), (True, True, "masks")]


def packing_id(packing: tuple[bool, bool, str]) -> str:
    checkpointing, shared, layout = packing
    return ("checkpointing-" if checkpointing else "") + (layout if shared else "padded")


def whole_games(tokenizer: Any, n: int = 24, seed: int = 2) -> list[Any]:
    """The whole games among ``self_play_steps(tokenizer, n=n, seed=seed)`` (the last one, cut
    short, dropped): what a learner that reads whole episodes (GAE) takes. ``tokenizer``: a
    tokenizer, or the folder of a model whose tokenizer to load."""
    if isinstance(tokenizer, str):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    steps = self_play_steps(tokenizer, n=n, seed=seed)
    return [s for s in steps if s.game_idx < steps[-1].game_idx]


def off_policy(path: str, steps: list[Any], seed: int = 0, spread: float = 0.3) -> list[Any]:
    """``steps`` with rollout logprobs: each completion token's logprob under the model at
    ``path`` moved by a uniform draw in [-spread, spread] (importance ratios away from 1, some
    past a cap of 1.2)."""
    import random

    rng = random.Random(seed)
    scored = base_logprobs(path, [(s.turn.prompt_token_ids, s.turn.completion_token_ids) for s in steps])
    return [s.model_copy(update={"turn": s.turn.model_copy(update={"logprobs": [lp + rng.uniform(-spread, spread) for lp in lps]})})
            for s, lps in zip(steps, scored)]


def choice_rows(steps: list[Any], seed: int = 0, vocab: int = 300) -> list[Any]:
    """``steps`` as decisions answered among choices, expanded (``expand_choices``): each offered
    its own completion and two others that differ from it at one token past the first, the
    completion drawn with probability 0.2-0.8 (``choice_probabilities`` apart from the model's:
    importance ratios away from 1). The rows' rollout logprobs are the completion's own."""
    import random

    from unstable_core import expand_choices

    rng = random.Random(seed)
    out = []
    for s in steps:
        ids = list(s.turn.completion_token_ids)
        if len(ids) < 2:
            out.append(s)
            continue
        at = rng.randrange(1, len(ids))
        others = [ids[:at] + [3 + (ids[at] + k) % (vocab - 3)] + ids[at + 1 :] for k in (1, 2)]
        p = rng.uniform(0.2, 0.8)
        logprobs = list(s.turn.logprobs) or [-1.0] * len(ids)
        out.append(s.model_copy(update={"turn": s.turn.model_copy(update={
            "choice_token_ids": [ids, *others], "choice_probabilities": [p, (1 - p) / 2, (1 - p) / 2], "logprobs": logprobs})}))
    return expand_choices(out)


def randomize_trainable(learner: Any, seed: int = 7, scale: float = 0.1) -> None:
    """Every trainable weight drawn from ``seed`` times ``scale`` (LoRA B and a value head start
    at zero: this makes every weight matter to the loss)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in learner.trainable().values():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def batch_loss(learner: Any, steps: list[Any]) -> Any:
    """The loss of a whole batch as an update's pass computes it: ``loss`` of each of its chunks
    (``chunk_index`` set, the batch's size as ``batch_size``), summed. ``steps`` as ``update``
    orders them (sorted where prefix sharing is on) and prepared (``prepare_batch``)."""
    total = None
    for index, chunk in enumerate(learner.chunks(steps)):
        learner.chunk_index = index
        loss = learner.loss(chunk, len(steps))[0]
        total = loss if total is None else total + loss
    learner.chunk_index = 0
    return total


def directional_derivatives(learner: Any, steps: list[Any], seed: int = 11, eps: float = 1e-2, later_pass: bool = False,
                            move: float = 0.02) -> dict[str, tuple[float, float]]:
    """For each optimizer of ``learner`` (policy, critic, ...): autograd's derivative of the
    batch's loss (``batch_loss``, what ``prepare`` computed held fixed, train mode: where
    gradient checkpointing acts) along a random unit direction over that optimizer's weights,
    and the central difference of the same loss with step ``eps``. ``later_pass``: the loss of a
    PPO pass after the first (``epoch`` 1), its first pass taken at the weights as they are and
    the weights then moved by ``move`` times a random draw (ratios away from 1).

    Use a float64 model: Qwen3's RMSNorm computes in float32 even there, so the loss carries
    about 5e-8 of rounding noise; the step of 1e-2 keeps it and the truncation error near 1e-5
    relative (steps of 1e-3 to 1e-5 leave 5e-5 to 1e-2 relative noise)."""
    import torch

    if learner.shared:
        steps = sorted(steps, key=lambda s: s.turn.prompt_token_ids + s.turn.completion_token_ids)
    params = learner.trainable()
    g = torch.Generator().manual_seed(seed)
    learner.model.train()
    learner.prepare_batch(steps)
    try:
        if later_pass:
            learner.epoch = 0
            with torch.no_grad():
                batch_loss(learner, steps)
                for p in params.values():
                    p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * move)
            learner.epoch = 1
        for p in params.values():
            p.grad = None
        batch_loss(learner, steps).backward()
        out = {}
        for name, optimizer in learner.optimizers.items():
            mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
            direction = {n: torch.randn(p.shape, generator=g, dtype=p.dtype) * (id(p) in mine) for n, p in params.items()}
            norm = sum(float((d * d).sum()) for d in direction.values()) ** 0.5
            direction = {n: d / norm for n, d in direction.items()}
            analytic = sum(float((p.grad * direction[n]).sum()) for n, p in params.items() if p.grad is not None)
            with torch.no_grad():
                def moved(sign: float) -> float:
                    for n, p in params.items():
                        p.add_(direction[n], alpha=sign * eps)
                    value = float(batch_loss(learner, steps))
                    for n, p in params.items():
                        p.sub_(direction[n], alpha=sign * eps)
                    return value

                out[name] = (analytic, (moved(1) - moved(-1)) / (2 * eps))
        return out
    finally:
        learner.epoch = learner.chunk_index = 0
        learner.model.eval()


def check_directional_derivatives(learner: Any, steps: list[Any], rtol: float = 1e-4, **kwargs: Any) -> dict[str, tuple[float, float]]:
    """``directional_derivatives`` each within ``rtol`` of its central difference, and not
    vanishing (the direction moves the loss)."""
    found = directional_derivatives(learner, steps, **kwargs)
    for name, (analytic, numeric) in found.items():
        assert abs(numeric) > 1e-5, f"{name}: the loss does not move along the direction ({numeric:.3g})"
        assert analytic == pytest.approx(numeric, rel=rtol, abs=1e-7), f"{name}: autograd {analytic:.10g}, finite differences {numeric:.10g}"
    return found


def updates_of_ranks(make: Any, batches: list[Any], ranks: int) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """The trainable weights (``trainable_copy``) of ``make(data_parallel=ranks)`` after an
    update on each batch, and the updates' metrics; its worker processes closed."""
    learner = make(data_parallel=ranks)
    try:
        metrics = [learner.update(b) for b in batches]
        return trainable_copy(learner), metrics
    finally:
        learner.close()


class LoraLearnerContract(LearnerContract):
    options: dict[str, Any] = {"device": "cpu", "lr": 1e-2, "lora": _LORA}
    inference = "hf"
    other_plugins = (("unstable_hf.plugin", hf_plugin),)
    inference_options: dict[str, Any] = {"device": "cpu", "max_tokens": 4, "lora": _LORA}
    token_range = (3, 300)  # inside the fast tiny model's 512-token vocabulary
    #: Adam's first steps move every LoRA weight by about lr whatever its gradient: at 1e-2 the
    #: warm-started tiny model's answers drift to noise within a few updates (measured), at 5e-3
    #: a rewarded answer rises steadily (0.27 -> 0.37 in 6 updates with REINFORCE)
    direction_options: dict[str, Any] = {"lr": 5e-3}
    #: coordinates checked by central differences, their step and tolerance. The model is loaded
    #: in float64, but Qwen3's RMSNorm computes in float32: a step of 1e-3 keeps the rounding
    #: noise below 1e-5 relative (measured; 1e-6 gives 0.7 % noise), the truncation error too.
    gradient_coordinates: int = 8
    gradient_eps: float = 1e-3
    gradient_rtol: float = 1e-3
    #: the gradient-checkpointing and ranks checks in float64 (float32 rounding, which Adam's first
    #: step turns into lr-sized moves of near-zero gradients, kept out); the ranks check with each
    #: step a chunk of its own, so that both sides compute on the same shapes (Qwen3's RMSNorm
    #: rounds at float32 even in a float64 model)
    same_update_options: dict[str, Any] = {"dtype": "float64", "data_parallel_timeout_s": 120}
    ranks_options: dict[str, Any] = {"mini_batch_size": 1}

    @pytest.fixture
    def model(self, tmp_path_factory: Any) -> ModelRef:
        path = build_fast_tiny(tmp_path_factory.getbasetemp() / "unstable-hf-fast-tiny")
        self.model_path = path
        return ModelRef(uid="base", kind="base", backend="hf", model=path)

    def make_batch(self, seed: int = 0) -> Any:
        """``make_steps``'s episodes with each completion token's logprob under the model as it
        is (what a fresh adapter gives, LoRA B being zero): a fresh learner's first update is on
        policy, its importance ratios 1."""
        batch = super().make_batch(seed)
        scored = base_logprobs(self.model_path, [(s.turn.prompt_token_ids, s.turn.completion_token_ids) for s in batch.steps])
        steps = [s.model_copy(update={"turn": s.turn.model_copy(update={"logprobs": lp})}) for s, lp in zip(batch.steps, scored)]
        return batch.model_copy(update={"steps": steps})

    def test_the_contract_batch_is_on_policy(self, component: Any) -> None:
        """The logprobs of ``make_batch`` are the fresh learner's own (to float32 rounding)."""
        import torch

        from .packing import Sequence, pack

        steps = self.make_batch(seed=5).steps
        packed = pack([Sequence(s.turn.prompt_token_ids, s.turn.completion_token_ids, []) for s in steps], component.device)
        with torch.no_grad():
            mine = component.policy.completion_logprobs(packed).tolist()
        theirs = [lp for s in steps for lp in s.turn.logprobs]
        assert mine == pytest.approx(theirs, abs=1e-4)

    @pytest.fixture
    def direction_model(self, tmp_path_factory: Any) -> ModelRef:
        """The fast tiny model warm-started on KuhnPoker answers (``DIRECTION_TINY``): it answers
        ``\\boxed{[bet]}``, ``\\boxed{[check]}`` and a few others, a bandit a learner can move."""
        path = build_fast_tiny(tmp_path_factory.getbasetemp() / "unstable-hf-fast-tiny", DIRECTION_TINY)
        return ModelRef(uid="base", kind="base", backend="hf", model=path)

    def direction_prompt(self, model: ModelRef) -> str:
        from transformers import AutoTokenizer

        from unstable_core import build_component

        observation = "[GAME] You are Player 0 in Kuhn Poker.\nYour card: K\nAvailable moves: '[check]', '[bet]'"
        return build_component("template", "qwen3-zs").render(observation, AutoTokenizer.from_pretrained(model.model))

    def test_loss_gradient_matches_float64_finite_differences(self, spec: Any, system: Any, tmp_path: Path,
                                                              model: ModelRef) -> None:
        """The gradient ``loss`` gives (through the memory-bounded logprobs and everything the
        algorithm adds) equals central differences of the same loss, with what ``prepare``
        computed held fixed, on the coordinates with the largest gradients. A loss with a
        detached factor that depends on the weights (an importance ratio) fails it: skip it
        there and say why."""
        import torch

        learner = self.build(spec, system, tmp_path, model, dtype="float64")
        batch = self.make_batch(seed=3)
        learner.update(batch)  # LoRA B starts at zero: one step makes every adapter weight matter
        steps = batch.steps
        learner.prepare_batch(steps)
        params = learner.trainable()
        for p in params.values():
            p.grad = None
        loss, _ = learner.loss(steps, len(steps))
        loss.backward()
        picked = sorted(((float(p.grad.abs().max()), name) for name, p in params.items() if p.grad is not None), reverse=True)
        picked = [name for g, name in picked[: self.gradient_coordinates] if g > 0]
        assert picked, "the loss has no gradient on any trainable parameter"
        eps = self.gradient_eps
        with torch.no_grad():
            for name in picked:
                p = params[name]
                flat = p.view(-1)
                i = int(p.grad.abs().view(-1).argmax())
                analytic = float(p.grad.view(-1)[i])
                keep = float(flat[i])
                flat[i] = keep + eps
                plus = float(learner.loss(steps, len(steps))[0])
                flat[i] = keep - eps
                minus = float(learner.loss(steps, len(steps))[0])
                flat[i] = keep
                numeric = (plus - minus) / (2 * eps)
                assert abs(numeric - analytic) <= self.gradient_rtol * abs(analytic) + 1e-9, (
                    f"{name}[{i}]: autograd {analytic:.10g}, finite differences {numeric:.10g}")


__all__ = ["FAST_TINY", "DIRECTION_TINY", "base_logprobs", "build_fast_tiny", "self_play_steps", "self_play_batches",
           "trainable_copy", "max_weight_diff", "LoraLearnerContract", "MATRIX", "PACKINGS", "packing_id", "whole_games",
           "off_policy", "choice_rows", "randomize_trainable", "batch_loss", "directional_derivatives",
           "check_directional_derivatives", "updates_of_ranks"]
