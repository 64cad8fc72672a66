"""Component kinds: what a plugin registers (spec records) and what a factory must build (protocols).

A plugin registers components by returning spec records from a registration hook, e.g.::

    @hookimpl
    def unstable_model_samplers():
        return [ModelSamplerSpec(name="my-sampler", summary="...", config=MyOptions, factory=make)]

``factory(options, ctx)`` receives the validated options (an instance of ``config``) and a
``BuildContext`` and returns an object that satisfies the kind's protocol below. Factories are the
place for heavy imports (torch, transformers, ray...), never the plugin module's top level.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .types import (
    Batch,
    Checkpoint,
    Completion,
    EnvSpec,
    GameResult,
    GenerationRequest,
    ModelRef,
    Step,
)

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class NoOptions(BaseModel):
    """Options model of a component that takes none."""

    model_config = ConfigDict(extra="forbid")


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


class ComponentSpec(BaseModel):
    """A registration record: one component a plugin offers."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, frozen=True)

    kind: ClassVar[str] = ""

    name: str = Field(description="Lowercase, dashes: how a config picks this component.")
    summary: str = Field(description="One line shown by `unstable components list`.")
    config: type[BaseModel] = Field(NoOptions, description="Pydantic model of the component's options.")
    factory: Callable[..., Any] = Field(description="factory(options, ctx) -> component.")
    check_run: Callable[[Any, Mapping[str, BaseModel]], None] | None = Field(
        None,
        description="check_run(options, components): raise ValueError when this component's options do not fit the rest "
        "of the run; `components` maps each chosen component's config key ('learner', 'inference', ...) to its "
        "validated options. Called by `unstable config check` and before every run.",
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


class EnvSamplerSpec(ComponentSpec):
    kind: ClassVar[str] = "env_sampler"


class ModelSamplerSpec(ComponentSpec):
    kind: ClassVar[str] = "model_sampler"


class RaterSpec(ComponentSpec):
    kind: ClassVar[str] = "rater"


class RewardTransformSpec(ComponentSpec):
    kind: ClassVar[str] = "reward_transform"
    stage: Literal["final", "step", "sampling"] = Field(description="Which pipeline the transform belongs to.")


class BufferSpec(ComponentSpec):
    kind: ClassVar[str] = "buffer"


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


class ExecutorSpec(ComponentSpec):
    kind: ClassVar[str] = "executor"


class TrackerSpec(ComponentSpec):
    kind: ClassVar[str] = "tracker"


class TemplateSpec(ComponentSpec):
    kind: ClassVar[str] = "template"


#: kind -> (registration hook name, record class)
KINDS: dict[str, tuple[str, type[ComponentSpec]]] = {
    "env": ("unstable_envs", EnvProviderSpec),
    "env_sampler": ("unstable_env_samplers", EnvSamplerSpec),
    "model_sampler": ("unstable_model_samplers", ModelSamplerSpec),
    "rater": ("unstable_raters", RaterSpec),
    "reward_transform": ("unstable_reward_transforms", RewardTransformSpec),
    "buffer": ("unstable_buffers", BufferSpec),
    "learner": ("unstable_learners", LearnerSpec),
    "inference": ("unstable_inference_backends", InferenceSpec),
    "executor": ("unstable_executors", ExecutorSpec),
    "tracker": ("unstable_trackers", TrackerSpec),
    "template": ("unstable_templates", TemplateSpec),
}


# ---------------------------------------------------------------------------------------------
# Protocols: what a factory's product must offer.
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class GameEnv(Protocol):
    """One running game, made by an env provider."""

    def reset(self, num_players: int, seed: int) -> None: ...

    def observe(self) -> tuple[int, str]:
        """Return (player id to act, observation text)."""
        ...

    def step(self, action: str) -> tuple[bool, bool]:
        """Apply the current player's action. Return (done, invalid): invalid is True when the
        environment rejected the action as an invalid move."""
        ...

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
        """Return (final reward per player, per-player info)."""
        ...


@runtime_checkable
class EnvProvider(Protocol):
    def make(self, env: EnvSpec) -> GameEnv: ...

    def known_env_ids(self) -> list[str]:
        """Ids known to work on this machine (for `unstable envs list`)."""
        ...


@runtime_checkable
class EnvSampler(Protocol):
    def sample(self, envs: Sequence[EnvSpec], rng: random.Random) -> EnvSpec:
        """Pick the environment of the next training game."""
        ...


@runtime_checkable
class Registry(Protocol):
    """What model samplers and raters see of the league's model registry (``ModelRegistry``).

    ``entries`` maps uid -> ``ModelEntry`` (``ref``, ``games``, ``wins``, ``draws``, ``losses``,
    ``invalid_games``, ``active``, ``rating``: a rater's own numbers, which it may write);
    ``current`` is the checkpoint being trained (or the base model), ``fixed()`` the fixed
    opponents in config order, ``checkpoints()`` the learner's snapshots oldest first (the base
    model first), ``active_checkpoints(limit)`` those still in the pool, and
    ``match_count(a, b)`` / ``head_to_head(a, b)`` the games two uids played against each other
    and (wins of a, draws, wins of b). Samplers only read it; the league counts the games."""

    entries: dict[str, Any]

    @property
    def current(self) -> ModelRef | None: ...

    def get(self, uid: str) -> Any: ...

    def fixed(self) -> list[ModelRef]: ...

    def checkpoints(self, include_base: bool = True) -> list[ModelRef]: ...

    def active_checkpoints(self, limit: int | None = None) -> list[ModelRef]: ...

    def match_count(self, a: str, b: str) -> int: ...

    def head_to_head(self, a: str, b: str) -> tuple[int, int, int]: ...


@runtime_checkable
class ModelSampler(Protocol):
    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Registry, rng: random.Random) -> list[ModelRef]:
        """Pick `num_seats` opponents to sit with `anchor` (the current checkpoint, or in a
        tournament a uniformly drawn agent)."""
        ...


@runtime_checkable
class Rater(Protocol):
    def update(self, result: GameResult, registry: Registry) -> None:
        """Update ratings after a finished game (store them in ``registry.get(uid).rating``)."""
        ...

    def ratings(self, registry: Registry) -> dict[str, dict[str, float]]:
        """uid -> rating fields (for snapshots and leaderboards)."""
        ...


@runtime_checkable
class FinalRewardTransform(Protocol):
    def __call__(self, rewards: dict[int, float], env_id: str) -> dict[int, float]: ...


@runtime_checkable
class StepRewardTransform(Protocol):
    def __call__(self, step: Step) -> Step: ...


@runtime_checkable
class SamplingRewardTransform(Protocol):
    def __call__(self, steps: list[Step]) -> list[Step]: ...


@runtime_checkable
class Buffer(Protocol):
    """Stores steps whose final and step reward transforms the core has already applied; the
    core applies the sampling transforms to what ``draw`` returns."""

    capacity: int

    def add(self, episodes: list[list[Step]]) -> int:
        """Store one game's trained seats, one list of steps (in turn order) per seat; return how
        many steps were stored."""
        ...

    def size(self) -> int: ...

    def draw(self, n: int) -> list[Step]:
        """Remove and return about n steps (without replacement)."""
        ...


@runtime_checkable
class Learner(Protocol):
    """``version`` counts updates made. Capabilities (``blocking``, ``drop_zero_advantage``) are
    declared on the ``LearnerSpec`` record."""

    version: int

    def update(self, batch: Batch) -> dict[str, float]:
        """Make exactly one policy update from the batch; return metrics."""
        ...

    def save_checkpoint(self, directory: str, uid: str) -> Checkpoint:
        """Write the trainable state atomically under `directory`."""
        ...


@runtime_checkable
class Inference(Protocol):
    """``tokenizer`` is the tokenizer whose chat template templates may use, or None."""

    tokenizer: Any

    async def generate(self, request: GenerationRequest) -> Completion:
        """Complete one prompt. Backends batch concurrent calls themselves."""
        ...

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        """Make a new checkpoint servable and return the policy version now served for it
        (``checkpoint.version``); the driver checks it before any game uses the checkpoint."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Executor(Protocol):
    """Placement only: where the roles of a run live. The driver holds the control flow."""

    def start(self, plan: Any) -> Any:
        """Build the roles of ``plan`` (a ``RunPlan``) where they run; return their handles
        (a ``RoleHandles``). Each handle's methods are awaited by the driver."""
        ...

    def shutdown(self) -> None:
        """Release every role (close backends, stop actors). Called once, also after a failure."""
        ...


@runtime_checkable
class Tracker(Protocol):
    """Receives the run's metrics records (``unstable_core.records``). ``wants_game_records``:
    whether it also wants one ``GameRecord`` per game (the driver builds them only then). An
    optional ``wants_transcripts = True`` also sends it a ``TranscriptRecord`` for each game
    whose transcript is written (``collection.transcripts``: a seeded sample)."""

    wants_game_records: bool

    def log(self, record: Any) -> None:
        """Record one metrics record (a pydantic model from ``unstable_core.records``)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Template(Protocol):
    def render(self, observation: str, tokenizer: Any = None) -> str:
        """Turn an observation into the prompt text."""
        ...

    def extract(self, completion: str) -> tuple[str, bool]:
        """Return (action for the environment, whether the format was right)."""
        ...


#: kind -> protocol the factory's product is checked against
PROTOCOLS: dict[str, type] = {
    "env": EnvProvider,
    "env_sampler": EnvSampler,
    "model_sampler": ModelSampler,
    "rater": Rater,
    "buffer": Buffer,
    "learner": Learner,
    "inference": Inference,
    "executor": Executor,
    "tracker": Tracker,
    "template": Template,
}
