"""Component kinds: what a plugin registers (spec records); what a factory must build is in
``protocols``.

A plugin registers components by returning spec records from a registration hook, e.g.::

    @hookimpl
    def unstable_model_samplers():
        return [ModelSamplerSpec(name="my-sampler", summary="...", config=MyOptions, factory=make)]

``factory(options, ctx)`` receives the validated options (an instance of ``config``) and a
``BuildContext`` and returns an object that satisfies the kind's protocol (``protocols.py``). Factories are the
place for heavy imports (torch, transformers, ray...), never the plugin module's top level.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .protocols import Buffer, EnvProvider, EnvSampler, Executor, Inference, Learner, ModelSampler, Rater, Template, Tracker
from .types import AdapterShape, EnvSpec, ModelRef

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class Options(BaseModel):
    """Base of a component's options model: unknown keys are refused (``config check`` names the
    key and the closest option). The core refuses them for any model that leaves ``extra`` to
    pydantic's default; a model that sets ``extra="allow"`` or ``"ignore"`` itself keeps them."""

    model_config = ConfigDict(extra="forbid")


class NoOptions(Options):
    """Options model of a component that takes none."""


class BuildContext:
    """What a factory may use besides its own options. It is made in the process where the
    component runs (the driver, or a role's worker), so it holds nothing that crosses processes.

    Attributes: ``run_dir`` (str or None), ``seed`` (this component's seed, derived from the run
    seed and its config key), ``rng`` (a ``random.Random`` seeded with it), ``config`` (the
    resolved run config as a dict), ``model`` (the ``ModelRef`` of the model being trained, or
    None), ``plugins`` (the process's ``PluginSystem``), ``build(kind, name, options)`` (builds
    another component in the same process) and ``extras`` (anything an executor hands over).
    """

    def __init__(
        self,
        *,
        run_dir: str | None = None,
        seed: int = 0,
        config: Mapping[str, Any] | None = None,
        model: ModelRef | None = None,
        plugins: Any = None,
        build: Callable[..., Any] | None = None,
        subscribe: Callable[[Any], None] | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = dict(config or {})
        self.model = model
        self.plugins = plugins
        self.build = build
        self._subscribe = subscribe
        self.extras = dict(extras or {})

    def subscribe(self, component: Any) -> None:
        """Let a component receive the lifecycle events of the role it runs in: its
        ``@hookimpl`` methods (``unstable_game_end(self, ctx)``, ``unstable_checkpoint_saved``)
        are called by that role (the league sees every finished game and every checkpoint),
        wherever the role runs. Outside a run this does nothing."""
        if self._subscribe is not None:
            self._subscribe(component)


class ChosenComponents(dict[str, BaseModel]):
    """What a ``check_run`` receives: each chosen component's validated options by config key
    ('learner', 'inference', 'buffer', ...), and what the chosen components declare about
    themselves: ``adapter``, the LoRA adapter the learner writes (``LearnerSpec.adapter``; None
    without a learner or when it declares none); and of the run: ``colocate``
    (``training.colocate``: the learner shares the trained model's backend's accelerator),
    ``model`` (what the trained model's backend loads, or None), ``model_options`` (the trained
    model's own ``options``, ``[model] options``: e.g. a sampling temperature that overrides the
    backend's), ``executor`` (the chosen executor's name: with ``local`` every role runs on
    this machine) and ``answers`` (``collection.answers``: 'free' or 'choice')."""

    def __init__(self, options: Mapping[str, BaseModel], adapter: AdapterShape | None = None, colocate: bool = False,
                 model: str | None = None, executor: str | None = None, model_options: Mapping[str, Any] | None = None,
                 answers: str = "free") -> None:
        super().__init__(options)
        self.answers = answers
        self.adapter = adapter
        self.colocate = colocate
        self.model = model
        self.executor = executor
        self.model_options: Mapping[str, Any] = dict(model_options or {})


class ComponentSpec(BaseModel):
    """A registration record: one component a plugin offers."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, frozen=True)

    kind: ClassVar[str] = ""

    name: str = Field(description="Lowercase, dashes: how a config picks this component.")
    summary: str = Field(description="One line shown by `unstable components list`.")
    config: type[BaseModel] = Field(NoOptions, description="Pydantic model of the component's options.")
    factory: Callable[..., Any] = Field(description="factory(options, ctx) -> component.")
    check_run: Callable[[Any, ChosenComponents], None] | None = Field(
        None,
        description="check_run(options, components): raise ValueError when this component's options do not fit the rest "
        "of the run; `components` (a ChosenComponents) maps each chosen component's config key ('learner', "
        "'inference', ...) to its validated options, and carries what they declare (`components.adapter`). Called by "
        "`unstable config check` and before every run.",
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(f"component name {v!r} must be lowercase letters, digits and dashes")
        return v

    @field_validator("summary")
    @classmethod
    def _check_summary(cls, v: str) -> str:
        if not v.strip() or "\n" in v.strip():
            raise ValueError("summary must be one non-empty line")
        return v.strip()


class EnvProviderSpec(ComponentSpec):
    kind: ClassVar[str] = "env"
    check_env: Callable[[EnvSpec, BaseModel], None] | None = Field(
        None,
        description="check_env(env, options): raise ValueError for an environment (id, players, kwargs) the provider "
        "cannot make; called by `unstable config check` and before a run starts.",
    )
    policy_metrics: bool = Field(
        False, description="The provider offers policy_metrics(env, probabilities) -> dict[str, float] (the PolicyMetrics "
        "protocol): exact figures of a policy on a game, e.g. its exploitability, from the probability of each legal "
        "action's answer in each information state (`collection.eval_policy_metrics`).",
    )
    legal_actions: bool = Field(
        False, description="Its games offer legal_actions() -> list[str] (the LegalActions protocol): the labels of the "
        "actions open to the player to move, so that `collection.answers = \"choice\"` can offer a model exactly those.",
    )
    check_least_exploitable: Callable[[EnvSpec, BaseModel], None] | None = Field(
        None,
        description="check_least_exploitable(env, options): raise ValueError for an environment whose least exploitable "
        "mixture (the LeastExploitable protocol) the provider cannot compute, e.g. a game that is not zero-sum or too "
        "large; called by `unstable config check` and before a run whose model sampler reads that mixture starts.",
    )


class EnvSamplerSpec(ComponentSpec):
    kind: ClassVar[str] = "env_sampler"


class ModelSamplerSpec(ComponentSpec):
    kind: ClassVar[str] = "model_sampler"
    exact_payoffs: Callable[[Any], bool] | None = Field(
        None, description="exact_payoffs(options) -> True when the sampler, with these options, reads the exact expected "
        "payoffs between checkpoints (`registry.exact_payoff`): the run then computes each new checkpoint's against every "
        "earlier one (an env provider that offers them, `ExactPayoffs`, and a trained backend that scores completions).",
    )
    least_exploitable: Callable[[Any], bool] | None = Field(
        None, description="least_exploitable(options) -> True when the sampler, with these options, reads the least "
        "exploitable mixture of members it names (`LeastExploitableSampler`, `registry.least_exploitable`): the run then "
        "computes it after each new checkpoint (one training env whose provider offers it, `LeastExploitable`).",
    )


class RaterSpec(ComponentSpec):
    kind: ClassVar[str] = "rater"


class RewardTransformSpec(ComponentSpec):
    kind: ClassVar[str] = "reward_transform"
    stage: Literal["final", "step", "sampling"] = Field(description="Which pipeline the transform belongs to.")
    needs_groups: bool = Field(
        False, description="The transform compares the games of a group (a group baseline): it needs `collection.group_size` "
        ">= 2 and must come before every sampling transform that mixes the batch.",
    )
    mixes_batch: bool = Field(
        False, description="A step's new reward depends on the rewards of other games of the batch (normalize): a group "
        "baseline after it would compare rewards already mixed across groups.",
    )


class BufferSpec(ComponentSpec):
    kind: ClassVar[str] = "buffer"
    keeps_episodes: bool = Field(
        False, description="The buffer stores and draws each episode it is given whole (never some of its steps): needed "
        "by grouped games (`collection.group_size` > 1: a group is handed over as one episode) and by learners that "
        "declare `needs_episodes`.",
    )


class LearnerSpec(ComponentSpec):
    kind: ClassVar[str] = "learner"
    blocking: bool = Field(
        False, description="update() is long synchronous work: the learner role runs it in a worker thread so games go on."
    )
    drop_zero_advantage: bool = Field(
        False,
        description="Steps whose reward (advantage) is exactly zero carry no gradient for this learner: drop them "
        "before update (REINFORCE). An actor-critic learner needs them (False). `training.filter_zero_advantage` overrides.",
    )
    computes_advantages: bool = Field(
        False, description="The learner computes its own advantages from each step's reward (a critic and GAE): the "
        "sampling transforms, which turn rewards into advantages, are refused by `config check`.",
    )
    needs_episodes: bool = Field(
        False, description="Each batch must hold whole episodes (every turn of a seat's game, for returns over turns): the "
        "buffer must declare `keeps_episodes`.",
    )
    needs_groups: bool = Field(
        False, description="The learner compares the games of a group (a group baseline of its own): `config check` asks "
        "for `collection.group_size` >= 2.",
    )
    adapter: Callable[[Any], AdapterShape | None] | None = Field(
        None,
        description="adapter(options) -> AdapterShape: the LoRA adapter this learner writes with these options, so that "
        "the serving backend can check it can load it before the run starts (vLLM: its max_lora_rank, no "
        "modules_to_save).",
    )


class InferenceSpec(ComponentSpec):
    kind: ClassVar[str] = "inference"
    check_model: Callable[[ModelRef], None] | None = Field(
        None, description="check_model(ref): raise ValueError for a model this backend cannot serve (checked before a run)."
    )
    model_options: type[BaseModel] = Field(
        NoOptions, description="Pydantic model of the per-model `options` of a model or opponent served by this backend."
    )
    serves_checkpoints: bool = Field(
        True, description="load_checkpoint serves a learner's checkpoints. False (a remote API, scripted agents): the backend "
        "serves fixed models only, and a training run whose model it serves is refused before it starts.",
    )
    scores_completions: bool = Field(
        False, description="The backend offers completion_probabilities(request, completions) -> list[float]: the exact "
        "probability that generate(request) answers each completion text under its sampling settings (the "
        "CompletionScorer protocol), so a policy can be extracted exactly (exploitability).",
    )
    answers_choices: bool = Field(
        False, description="generate honours `request.choices`: it answers one of those texts, drawn with the probability "
        "the model gives each, renormalised over them (`collection.answers = \"choice\"`).",
    )
    answers_at_once: bool = Field(
        False, description="generate never waits (scripted agents, a table lookup): a game whose seats are all served by "
        "such backends is played inline, without a task of its own.",
    )
    releases_memory: bool = Field(
        False, description="The backend offers sleep() and wake(): sleep hands the accelerator memory its models hold back "
        "(weights offloaded, caches dropped) until wake; `training.colocate` calls them around every learner update.",
    )


class ExecutorSpec(ComponentSpec):
    kind: ClassVar[str] = "executor"


TrackerWants = bool | str


class TrackerSpec(ComponentSpec):
    kind: ClassVar[str] = "tracker"
    game_records: TrackerWants = Field(
        False, description="Send this tracker a `game` record for every game: True, False, or the name of a boolean "
        "option of its config that decides it.",
    )
    transcripts: TrackerWants = Field(
        False, description="Send this tracker a `TranscriptRecord` for every game whose transcript is kept: True, "
        "False, or the name of a boolean option of its config that decides it.",
    )

    @model_validator(mode="after")
    def _check_option_names(self) -> TrackerSpec:
        for flag in ("game_records", "transcripts"):
            option = getattr(self, flag)
            if isinstance(option, str) and self.config.model_fields.get(option) is None:
                raise ValueError(f"{flag} names option {option!r}, which {self.config.__name__} does not have")
        return self

    def wants(self, flag: str, options: BaseModel) -> bool:
        """Whether this tracker, with these validated options, wants ``flag`` ('game_records' or
        'transcripts')."""
        value = getattr(self, flag)
        return bool(getattr(options, value)) if isinstance(value, str) else value


class TemplateSpec(ComponentSpec):
    kind: ClassVar[str] = "template"


@dataclass(frozen=True)
class Kind:
    """One component kind: the hook that registers it, its record class, the protocol a
    factory's product is checked against (None: a reward transform is a plain callable), and
    whether a run config picks exactly one of it in a section named after the kind."""

    hook: str
    spec: type[ComponentSpec]
    protocol: type | None
    config_section: bool


#: every component kind, in the order the catalog and `unstable components list` show them
KINDS: dict[str, Kind] = {
    "env": Kind("unstable_envs", EnvProviderSpec, EnvProvider, True),
    "env_sampler": Kind("unstable_env_samplers", EnvSamplerSpec, EnvSampler, True),
    "model_sampler": Kind("unstable_model_samplers", ModelSamplerSpec, ModelSampler, True),
    "rater": Kind("unstable_raters", RaterSpec, Rater, True),
    "reward_transform": Kind("unstable_reward_transforms", RewardTransformSpec, None, False),
    "buffer": Kind("unstable_buffers", BufferSpec, Buffer, True),
    "learner": Kind("unstable_learners", LearnerSpec, Learner, True),
    "inference": Kind("unstable_inference_backends", InferenceSpec, Inference, True),
    "executor": Kind("unstable_executors", ExecutorSpec, Executor, True),
    "tracker": Kind("unstable_trackers", TrackerSpec, Tracker, False),
    "template": Kind("unstable_templates", TemplateSpec, Template, False),
}

__all__ = [
    "NAME_RE", "NoOptions", "BuildContext", "ComponentSpec", "EnvProviderSpec", "EnvSamplerSpec", "ModelSamplerSpec",
    "RaterSpec", "RewardTransformSpec", "BufferSpec", "LearnerSpec", "InferenceSpec", "ExecutorSpec", "TrackerSpec",
    "TemplateSpec", "Kind", "KINDS", "ChosenComponents",
]
