"""RunConfig: one TOML file describes a run.

A section per component picks it by ``name`` and gives its options, e.g.::

    [learner]
    name = "reinforce"
    lr = 1e-5

The chosen component's options are validated by its own pydantic model (from the plugin's spec
record), so a typo in a plugin option is a clear error before any work starts. ``--set a.b=c``
overrides any key (values are parsed as TOML, falling back to a plain string). Nothing from a
config is executed.

This module holds the config's models and ``validate_config`` / ``load_config``; reading files and
overrides is in ``config_loading``, checking the chosen components against the installed plugins
in ``config_check``, the JSON Schema in ``config_schema``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .components import KINDS
from .config_loading import MAX_NESTING, apply_overrides, format_validation_error, nesting_depth, read_toml
from .errors import ConfigError
from .types import EnvSpec, ModelRef

#: config sections that pick one component; each is named after its component kind
#: the kinds a config picks one of, each in a section named after it
SINGLE_SECTIONS = tuple(kind for kind, entry in KINDS.items() if entry.config_section)


def env_provider_of(env_id: str, default: str) -> str:
    """The env provider that makes ``env_id``: PROVIDER for 'PROVIDER/GAME', else ``default``
    (the run's [env] provider)."""
    prefix, slash, _ = env_id.partition("/")
    return prefix if slash else default


class ComponentChoice(BaseModel):
    """``name`` picks a component; every other key is one of its options."""

    model_config = ConfigDict(extra="allow")

    name: str

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


MAX_IN_FLIGHT = 65_536


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class CollectionConfig(Section):
    mode: Literal["async", "sync"] = Field(
        "async",
        description="'async': games are played while the learner trains (UnstableBaselines' way; faster, not reproducible). "
        "'sync': each learner step plays the games it needs with the current policy, then updates; games move in "
        "fixed batches, in turn rounds (every game's request reaches the backend together) and are counted in game "
        "order, so that two runs of one config on one machine give the same "
        "metrics, transcripts and weights.",
    )
    num_train_games: int = Field(8, ge=1, le=MAX_IN_FLIGHT, description="Training (or tournament) games kept in flight.")
    group_size: int = Field(
        1, ge=1, le=1024, description="Each scheduled training game is played this many times from the same seed and seats "
        "(the same deal and first observation; the sampling seeds differ): a group, stored and drawn whole by the buffer "
        "(one that keeps episodes: `episode`), for group baselines (GRPO, RLOO: the `group-baseline` transform). Games "
        "in flight are rounded up to whole groups.",
    )
    branch_turn: int = Field(
        0, ge=0, le=1_000_000, description="With group_size > 1: the games of a group sample their first branch_turn turns "
        "(every player's, in play order) with the same seeds, so they share that opening as far as the backends' seeded "
        "sampling is deterministic, and branch after it (0: from the first turn).",
    )
    answers: Literal["free", "choice"] = Field(
        "free", description="'free': a model writes its answer token by token and may write one the env rejects. "
        "'choice': each turn the model's backend answers one of the legal actions' answers (\\boxed{label}), drawn "
        "with the probability the model gives each, renormalised over them: it never answers invalidly, and plays "
        "exactly the policy the exact metrics read (docs/openspiel.md). Needs an env provider that offers "
        "`legal_actions` (openspiel) and a trained backend that declares `answers_choices` (hf); other backends "
        "(scripted agents) answer as before.",
    )
    choice_mass: float = Field(
        0.5, ge=0, le=100, description="With answers = 'choice': weight of the offered answers' total log-probability, "
        "trained up beside the renormalised policy's gradient (each choice's row gains choice_mass times its "
        "renormalised probability as advantage). The renormalised gradient alone leaves that total free to fall, "
        "and with 0 the tiny model's answer distribution flattened and its policy stopped learning (docs/openspiel.md).",
    )
    num_eval_games: int = Field(4, ge=1, le=MAX_IN_FLIGHT, description="Evaluation games kept in flight.")
    eval_policy_metrics: bool = Field(
        False, description="With each evaluation, also the exact policy metrics the env's provider offers for the evaluated "
        "model (openspiel: exploitability, nash_conv, invalid_mass), in the eval records' `policy`; the model's "
        "backend must score completions (hf, scripted).",
    )
    eval_mixtures: list[Literal["uniform", "meta"]] = Field(
        default_factory=list, description="With eval_policy_metrics: also the exact policy metrics of the population's "
        "mixtures at each evaluation, in the eval records' `mixtures`: 'uniform', every checkpoint so far (the base model "
        "included) drawn alike once a game (fictitious play's output); 'meta', the mixture the model sampler targets "
        "(psro's meta-game Nash mixture, fictitious's members; nothing with a sampler that keeps none). Each checkpoint "
        "is scored once a run.",
    )
    eval_games: int = Field(
        16, ge=0, le=1_000_000, description="Evaluation games per (checkpoint, env, opponent): the cap of one evaluation round."
    )
    tournament_games: int = Field(100, ge=0, le=1_000_000_000, description="Without a learner: games played in the tournament.")
    max_turns: int = Field(200, ge=1, le=1_000_000, description="A game with more turns than this is truncated (reward 0 for all).")
    max_action_chars: int = Field(
        1000, ge=1, le=1_000_000,
        description="An extracted action longer than this is cut to this length before the env sees it (a huge action can stall a game for seconds).",
    )
    env_calls: Literal["auto", "loop", "threads"] = Field(
        "auto",
        description="Where env calls (make, reset, observe, step, close) run: 'loop' on the event loop the games share "
        "(fastest; a slow call stalls every game in flight), 'threads' on worker threads (a slow or blocking call stalls "
        "only its own game; tens of microseconds more per call), 'auto' on the loop until a call of an env id takes longer "
        "than slow_env_call_ms, then on threads for that env id.",
    )
    slow_env_call_ms: float = Field(20.0, ge=0, le=3_600_000, description="In env_calls = 'auto': what a slow env call is.")
    request_timeout_s: float = Field(
        600.0, gt=0, le=86_400, description="The longest a backend that waits for anything (not a scripted agent) may take to "
        "answer one request; past it the run stops, naming the backend and the model (a silent backend never hangs it).",
    )
    transcripts: float = Field(
        0.1, ge=0, le=1, description="Fraction of training and tournament games whose transcript is written to games/."
    )
    eval_transcripts: float = Field(1.0, ge=0, le=1, description="Fraction of evaluation games whose transcript is written.")
    max_game_failures: int | None = Field(None, ge=0, description="Stop the run after this many failed games (None: never).")


class TrainingConfig(Section):
    learning_steps: int = Field(0, ge=0, description="Learner updates to make; exactly this many.")
    allow_non_finite: bool = Field(
        False, description="Go on when the learner reports a NaN or infinite metric (loss, grad norm); by default the run "
        "stops at that update, naming the learner and the metric.",
    )
    logprob_gap_tolerance: float = Field(
        1e-2, gt=0, description="Warn once (on the console) when an update's `logprob_gap_mean` passes this many nats: the "
        "mean |learner - rollout| logprob over the tokens of the steps the updated weights played, which should be 0 up to "
        "float rounding (docs/logprobs.md#the-live-check-rollout-vs-learner-logprobs-in-every-update).",
    )
    batch_size: int = Field(64, ge=1, le=10_000_000, description="Steps per learner update.")
    eval_every: int = Field(0, ge=0, description="Evaluate every N updates (0: only before and after training).")
    save_every: int = Field(1, ge=1, description="Save a checkpoint and a run snapshot (for --resume) every N updates.")
    keep_snapshots: int = Field(2, ge=0, description="Run snapshots kept in RUN_DIR/state (0: none are written; such a run cannot be resumed).")
    filter_zero_advantage: bool | None = Field(
        None,
        description="Drop steps whose reward (advantage) is exactly zero before the update; None: as the learner "
        "declares (`drop_zero_advantage` on its record: REINFORCE drops them, an actor-critic keeps them).",
    )
    max_empty_batches: int = Field(
        1000, ge=1, description="Fail the run after this many drawn batches in a row were emptied by the filter."
    )
    colocate: bool = Field(
        False, description="The learner shares its accelerator with the trained model's inference backend: before every "
        "update the backend sleeps (hands its memory back: weights offloaded, caches dropped) and wakes after it. Needs "
        "collection.mode = 'sync' (no game may generate during an update) and a backend that declares releases_memory.",
    )


class RewardConfig(Section):
    final: list[ComponentChoice] = Field(
        default_factory=lambda: [ComponentChoice(name="win-draw-loss")],
        description="Transforms of a game's final rewards, in order (stage 'final').",
    )
    step: list[ComponentChoice] = Field(default_factory=list, description="Transforms of each step's reward (stage 'step').")
    sampling: list[ComponentChoice] = Field(default_factory=list, description="Transforms of a drawn batch (stage 'sampling').")


class OpponentConfig(Section):
    uid: str = Field(description="Registry id of the opponent (also its name in metrics).")
    backend: str = Field("scripted", description="Inference component that serves it.")
    model: str = Field("", description="What the backend loads (scripted: the agent name; default: the uid).")
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options for this model.")

    @model_validator(mode="before")
    @classmethod
    def _from_str(cls, v: Any) -> Any:
        if isinstance(v, str):  # "random-valid" is a scripted agent of that name
            return {"uid": v, "backend": "scripted", "model": v}
        return v

    def ref(self) -> ModelRef:
        return ModelRef(uid=self.uid, kind="fixed", backend=self.backend, model=self.model or self.uid, options=self.options)


class ModelConfig(Section):
    """The model being trained."""

    uid: str = Field("base", description="Registry id of the untrained model; checkpoints are ckpt-N.")
    backend: str | None = Field(None, description="Inference backend; defaults to [inference].name.")
    model: str = Field(description="Hub id, local path, or for the scripted backend an agent name.")
    options: dict[str, Any] = Field(default_factory=dict, description="Backend-specific options for this model.")


class RunConfig(Section):
    """The whole run. See docs/config.md for every key."""

    name: str = Field(
        "run", pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,99}$",
        description="Name of the run (default run directory runs/NAME-TIME): letters, digits, spaces, '.', '_', '-' (no path).",
    )
    seed: int = Field(0, description="Run seed: every game's seed and scheduling draw derive from it and the game index.")
    run_dir: str | None = Field(None, description="Run directory (the CLI's --run-dir wins).")
    model: ModelConfig | None = Field(None, description="The model being trained (needed with a learner).")
    opponents: list[OpponentConfig] = Field(default_factory=list, description="Fixed opponents; a plain string is a scripted agent.")
    train_envs: list[EnvSpec] = Field(default_factory=list, description="Training environments; a plain string is an env id.")
    eval_envs: list[EnvSpec] | None = Field(None, description="Evaluation environments (default: the training ones).")

    env: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="textarena"), description="Env provider component.")
    env_sampler: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="uniform"), description="Env sampler component.")
    model_sampler: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="mirror"), description="Opponent sampler component.")
    rater: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="wins"), description="Rater component.")
    buffer: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="step"), description="Buffer component.")
    learner: ComponentChoice | None = Field(None, description="Learner component; none: play a tournament.")
    inference: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="scripted"), description="Inference backend of the model being trained.")
    executor: ComponentChoice = Field(default_factory=lambda: ComponentChoice(name="local"), description="Executor component.")
    trackers: list[ComponentChoice] = Field(
        default_factory=lambda: [ComponentChoice(name="jsonl"), ComponentChoice(name="console")],
        description="Tracker components, each a table with `name`.",
    )
    backends: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Options of inference backends used only by opponents, by backend name."
    )
    env_providers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Options of env providers other than [env], by provider name: an env id "
        "'PROVIDER/GAME' (e.g. 'openspiel/kuhn_poker') is made by the provider PROVIDER.",
    )

    reward: RewardConfig = Field(default_factory=RewardConfig, description="Reward transform pipelines.")
    collection: CollectionConfig = Field(default_factory=CollectionConfig, description="Games in flight, evaluation, transcripts.")
    training: TrainingConfig = Field(default_factory=TrainingConfig, description="Learner steps, batches, checkpoints, evaluation.")

    @field_validator("train_envs", "eval_envs", mode="before")
    @classmethod
    def _env_strs(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"env_id": e} if isinstance(e, str) else e for e in v]
        return v

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if not self.train_envs and not self.eval_envs:
            raise ValueError("at least one of train_envs or eval_envs must list an environment")
        if self.learner is not None and self.model is None:
            raise ValueError("a learner needs a [model] section (the model being trained)")
        if self.learner is None and not self.opponents:
            raise ValueError("without a learner, [[opponents]] must list the agents of the tournament")
        dup = {u for u, n in Counter(o.uid for o in self.opponents).items() if n > 1}
        if dup:
            raise ValueError(f"opponent uid(s) listed twice: {', '.join(sorted(dup))}")
        if self.collection.eval_mixtures and not self.collection.eval_policy_metrics:
            raise ValueError("collection.eval_mixtures needs collection.eval_policy_metrics = true (the mixtures' figures are policy metrics)")
        return self

    @property
    def evaluation_envs(self) -> list[EnvSpec]:
        return list(self.eval_envs if self.eval_envs is not None else self.train_envs)

    def model_ref(self) -> ModelRef | None:
        if self.model is None:
            return None
        return ModelRef(
            uid=self.model.uid,
            kind="base",
            backend=self.model.backend or self.inference.name,
            model=self.model.model,
            options=self.model.options,
        )

    def env_provider_names(self) -> list[str]:
        """The env providers besides [env]: named by an env id's prefix, or listed in env_providers."""
        named = {env_provider_of(e.env_id, self.env.name) for e in [*self.train_envs, *(self.eval_envs or [])]}
        return sorted((named | set(self.env_providers)) - {self.env.name})

    def component_choices(self) -> list[tuple[str, str, ComponentChoice]]:
        """(key path, kind, choice) for every component section in the config."""
        out: list[tuple[str, str, ComponentChoice]] = [
            (key, key, getattr(self, key)) for key in SINGLE_SECTIONS if getattr(self, key) is not None
        ]
        out += [(f"env_providers.{name}", "env", ComponentChoice(name=name, **self.env_providers.get(name, {})))
                for name in self.env_provider_names()]
        out += [(f"trackers.{i}", "tracker", c) for i, c in enumerate(self.trackers)]
        for stage in ("final", "step", "sampling"):
            out += [(f"reward.{stage}.{i}", "reward_transform", c) for i, c in enumerate(getattr(self.reward, stage))]
        return out


def validate_config(data: Mapping[str, Any], source: str = "<config>") -> RunConfig:
    """A RunConfig from a config dict (the plugins' options are checked by ``config check``)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a config is a table (a dict), not {type(data).__name__}")
    if nesting_depth(dict(data)) > MAX_NESTING:
        raise ConfigError(f"{source}: tables or lists nest too deeply (at most {MAX_NESTING} levels)")
    try:
        # strict: TOML gives every value its type, so nothing is coerced ("yes" is no boolean,
        # true no integer); a plain string still names an env or an opponent (the validators)
        return RunConfig.model_validate(dict(data), strict=True)
    except ValidationError as exc:
        from .config_check import summarize

        raise ConfigError(summarize(format_validation_error(exc, source, model=RunConfig).splitlines())) from None


def load_config(path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> RunConfig:
    """Read a TOML run config, apply ``--set`` overrides and validate it (not the plugin options:
    see ``resolve_components``)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"a config path is a string or a path, not {type(path).__name__}")
    data = apply_overrides(read_toml(path), overrides)
    return validate_config(data, str(path))
