"""Tiny local models: a small Qwen3-architecture causal LM with a byte-level BPE tokenizer trained
locally on TextArena text, saved with ``save_pretrained`` so everything else takes the real
``from_pretrained`` path. Deterministic from a seed.

Optionally warm-started: a short supervised phase on transcripts of scripted agents (by default
``random-valid``), so that a randomly initialised model starts out answering in the expected
``\\boxed{...}`` format with moves that are usually valid. Reinforcement learning then has a
policy to improve instead of noise.

Shorthand (in a config's ``[model] model = ...`` or on the command line)::

    tiny                                   defaults (KuhnPoker-v0-train, seed 0, warm start)
    tiny:KuhnPoker-v0-train,TicTacToe-v0-train?seed=1&sft_steps=0&hidden=64
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from unstable_core.progress import task

from .loading import quiet_third_party
from .warm_start import Targets, supervised_warm_start

if TYPE_CHECKING:  # pragma: no cover
    from unstable_core import CompletionScorer

#: bumped whenever the build gives another model for the same spec (cached models are rebuilt)
BUILD_VERSION = 3
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class TinySpec(BaseModel):
    """Everything that determines a tiny model (its cache key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_ids: tuple[str, ...] = Field(("KuhnPoker-v0-train",), description="Games whose text trains the tokenizer and the warm start.")
    seed: int = Field(0, description="Seed of everything random in the build.")
    vocab_size: int = Field(1024, ge=300, description="BPE vocabulary size (special tokens included).")
    hidden: int = Field(128, ge=32, description="Hidden size.")
    layers: int = Field(2, ge=1, description="Transformer layers.")
    heads: int = Field(4, ge=1, description="Attention heads (head_dim = 32).")
    kv_heads: int = Field(2, ge=1, description="Key/value heads.")
    intermediate: int = Field(512, ge=32, description="MLP width.")
    template: str = Field("qwen3-zs", description="Template whose prompts the model is trained on.")
    corpus_games: int = Field(300, ge=1, description="Scripted games whose text trains the tokenizer.")
    sft_steps: int = Field(150, ge=0, description="Supervised warm-start steps (0: none).")
    sft_batch: int = Field(16, ge=1, description="Warm-start batch size.")
    sft_lr: float = Field(2e-3, gt=0, description="Warm-start learning rate (AdamW).")
    sft_agent: str = Field("random-valid", min_length=1, description="Agent imitated by the warm start (served by sft_backend).")
    sft_backend: str = Field(
        "scripted", min_length=1,
        description="Inference backend that serves sft_agent and sft_opponent: 'scripted', or one that serves fixed agents "
        "without a model, e.g. 'openspiel' (cfr, best-response:SPEC).",
    )
    sft_opponent: str | None = Field(
        None, min_length=1,
        description="Scripted agent in the other seat of the warm-start games; only sft_agent's moves are imitated (None: sft_agent plays both seats).",
    )
    sft_targets: Literal["agent", "all-valid", "policy"] = Field(
        "agent",
        description="What the warm start imitates at each of sft_agent's positions: its answer (agent), or every valid "
        "move of the position, equally weighted (all-valid: the distribution random-valid samples from, learned "
        "without its sampling noise; sft_agent then only plays the games), or every valid move weighted by the "
        "probability sft_agent gives it (policy: its whole distribution; the backend must score completions), mixed "
        "with the even weights by sft_mix.",
    )
    sft_mix: float = Field(
        1.0, ge=0, le=1,
        description="With sft_targets = 'policy': the share of sft_agent's probabilities in each target, the rest "
        "spread evenly over the valid moves (0.2: a weak player, a fifth the agent and four fifths random).",
    )

    @model_validator(mode="after")
    def _mix_needs_policy_targets(self) -> TinySpec:
        if self.sft_mix != 1.0 and self.sft_targets != "policy":
            raise ValueError("sft_mix mixes sft_agent's probabilities with even weights: it needs sft_targets=policy")
        return self

    @classmethod
    def parse(cls, text: str) -> TinySpec:
        """Parse ``tiny[:ENV,ENV][?key=value&...]``."""
        if not text.startswith("tiny"):
            raise ValueError(f"not a tiny model spec: {text!r}")
        rest = text[4:]
        query = ""
        if "?" in rest:
            rest, query = rest.split("?", 1)
        data: dict[str, Any] = {}
        if rest.startswith(":") and rest[1:]:
            data["env_ids"] = tuple(e for e in rest[1:].split(",") if e)
        elif rest and rest != ":":
            raise ValueError(f"bad tiny model spec {text!r}: expected tiny[:ENV,ENV][?key=value]")
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key not in cls.model_fields or key == "env_ids":
                raise ValueError(f"bad tiny model spec {text!r}: unknown key {key!r}")
            data[key] = value
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" if err["loc"] else
                                 err["msg"].removeprefix("Value error, ") for err in e.errors())
            raise ValueError(f"bad tiny model spec {text!r}: {problems}") from None

    def check_agents(self) -> None:
        """Raise ValueError naming the key if sft_agent or sft_opponent is no agent of sft_backend, or
        if sft_targets = 'policy' asks sft_backend for probabilities it does not give."""
        from unstable_core import InferenceSpec, ModelRef, UnknownComponentError, get_plugin_system

        try:
            scripted = get_plugin_system().spec(InferenceSpec, self.sft_backend)
        except UnknownComponentError as e:
            raise ValueError(f"tiny model: sft_backend: {e}") from None
        if self.sft_targets == "policy" and not scripted.scores_completions:
            raise ValueError(f"tiny model: sft_targets: 'policy' needs the probability of each move, and sft_backend "
                             f"{self.sft_backend!r} scores no completions (scripted and openspiel do)")
        for key in ("sft_agent", "sft_opponent"):
            name = getattr(self, key)
            if name is not None:
                try:
                    if scripted.check_model is not None:
                        scripted.check_model(ModelRef(uid=name, model=name, backend=self.sft_backend))
                except ValueError as e:
                    raise ValueError(f"tiny model: {key}: {e}") from None

    def key(self) -> str:
        """Cache key: the spec, the version of the build recipe, and the version of each env
        provider other than textarena (whose text the corpus and the warm start are made of)."""
        from unstable_core import env_provider_of, get_plugin_system

        # keys of earlier specs unchanged: options at their defaults that were added later are left out
        unset = {k for k, default in (("sft_opponent", None), ("sft_targets", "agent"), ("sft_backend", "scripted"),
                                      ("sft_mix", 1.0))
                 if getattr(self, k) == default}
        providers = sorted({env_provider_of(e, "textarena") for e in self.env_ids} - {"textarena"})
        system = get_plugin_system() if providers else None
        versions = "".join(f"|{p}={system.provider_of('env', p).version}" for p in providers) if system else ""
        return hashlib.sha256((self.model_dump_json(exclude=unset) + f"|build{BUILD_VERSION}{versions}").encode()).hexdigest()[:16]


def scripted_games(spec: TinySpec, games: int, seed: int, opponent: str | None = None,
                   targets: Literal["agent", "all-valid", "policy"] = "agent") -> Targets:
    """(prompt, [completion], weights) targets of the scripted agent playing itself on the spec's
    games, or, with `opponent`, only its own targets against that agent (seats alternating), through
    the components a run uses (env provider, template, scripted backend). Each prompt's completions
    are the agent's answer (`agent`), or every valid move of the position, evenly weighted
    (`all-valid`) or weighted by the agent's probability of it mixed with the even weights by
    ``spec.sft_mix`` (`policy`). Played on an event loop of its own thread, so a build may start
    from code that runs in a loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _play_scripted(spec, games, seed, opponent, targets)).result()


def _policy_weights(agent: CompletionScorer, request: Any, answers: list[str], mix: float) -> list[float]:
    """The agent's probability of each answer (renormalised over them), mixed with even weights
    (``check_agents`` made sure its backend scores completions)."""
    found = [float(p) for p in agent.completion_probabilities(request, answers)]
    total = sum(found)
    agent_share = [p / total for p in found] if total > 0 else [1 / len(answers)] * len(answers)
    return [mix * p + (1 - mix) / len(answers) for p in agent_share]


async def _play_scripted(spec: TinySpec, games: int, seed: int, opponent: str | None, targets: str) -> Targets:
    from unstable_core import EnvSpec, GenerationRequest, ModelRef, build_component, env_provider_of, valid_moves

    template = build_component("template", spec.template)
    providers = {name: build_component("env", name) for name in {env_provider_of(e, "textarena") for e in spec.env_ids}}
    agent = build_component("inference", spec.sft_backend)
    ref = ModelRef(uid=spec.sft_agent, model=spec.sft_agent, backend=spec.sft_backend)
    other = ModelRef(uid=opponent, model=opponent, backend=spec.sft_backend) if opponent else ref
    rng = random.Random(seed)
    pairs: list[tuple[str, list[str], list[float] | None]] = []
    for g in range(games):
        env_id = spec.env_ids[g % len(spec.env_ids)]
        game = providers[env_provider_of(env_id, "textarena")].make(EnvSpec(env_id=env_id))
        game.reset(num_players=2, seed=rng.getrandbits(31))
        done, turns = False, 0
        while not done and turns < 100:
            pid, obs = game.observe()
            prompt = template.render(obs)
            imitated = opponent is None or pid == g % 2
            request = GenerationRequest(model=ref if imitated else other, prompt=prompt, observation=obs, env_id=env_id,
                                        seed=rng.getrandbits(31))
            completion = (await agent.generate(request)).text
            if imitated:
                answers = [f"\\boxed{{{m}}}" for m in valid_moves(obs)] if targets != "agent" else []
                if targets == "policy" and answers:
                    pairs.append((prompt, answers, _policy_weights(agent, request, answers, spec.sft_mix)))
                else:
                    pairs.append((prompt, answers or [completion], None))
            done, _ = game.step(template.extract(completion)[0])
            turns += 1
        game.close()
    return pairs


def train_tokenizer(texts: list[str], vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(spec: TinySpec, tokenizer: Any) -> Any:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(spec.seed)
    return Qwen3ForCausalLM(config)


def build_tiny(spec: TinySpec, path: str | os.PathLike[str], log: Any = None) -> Path:
    """Build the tokenizer and model (and the warm start) and save them to `path`."""
    path = Path(path)
    spec.check_agents()  # before any game is played
    quiet_third_party()
    with task(f"playing {spec.corpus_games} scripted games for the tiny model's corpus"):
        corpus = scripted_games(spec, spec.corpus_games, spec.seed)
    texts = [p for p, _, _ in corpus] + [c for _, cs, _ in corpus for c in cs]
    with task("training the tiny model's tokenizer"):
        tokenizer = train_tokenizer(texts, spec.vocab_size)
    model = build_model(spec, tokenizer)
    losses: list[float] = []
    if spec.sft_steps:
        pairs = scripted_games(spec, max(50, spec.corpus_games), spec.seed + 1, spec.sft_opponent, spec.sft_targets)
        losses = supervised_warm_start(model, tokenizer, pairs, spec, log)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "unstable_tiny.json").write_text(
        json.dumps({"spec": spec.model_dump(mode="json"), "warm_start_losses": losses[-10:]}, indent=2)
    )
    return path


def ensure_tiny(spec: TinySpec, root: Path, log: Any = None, local: bool = False) -> Path:
    """The cached folder of `spec`: the build shipped with unstable-hf where there is one
    (``shipped.py``: the same model on every machine), else built here atomically if it is not
    there yet (``local``, or ``UNSTABLE_TINY_BUILD=local``: built here whatever is shipped, in
    ``tiny-KEY-local``)."""
    from .shipped import builds_locally, install, shipped_build

    local = local or builds_locally()
    shipped = None if local else shipped_build(spec.key())
    if shipped is not None:
        return install(shipped, root / f"tiny-{shipped.key}")
    final = root / f"tiny-{spec.key()}{'-local' if local else ''}"
    if (final / "unstable_tiny.json").exists():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-build-", dir=root))
    try:
        with task(f"building tiny model {final.name} (once; cached in {root})"):
            build_tiny(spec, tmp, log)
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished first
            if not (final / "unstable_tiny.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
