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
    """What a factory may use besides its own options.

    Attributes: ``run_dir`` (str or None), ``seed`` (the run seed), ``rng`` (a ``random.Random``
    derived from it for this component), ``registry`` (the model registry, None outside a run),
    ``config`` (the resolved run config as a dict), ``hook`` (the plugin manager's hook relay) and
    ``build`` (``build(kind, name, options)`` builds another component), ``rewards`` (the run's
    ``RewardPipelines``: buffers call its ``final``, ``step`` and ``sampling`` methods) and
    ``extras`` (anything an executor wants to hand its components).
    """

    def __init__(
        self,
        *,
        run_dir: str | None = None,
        seed: int = 0,
        registry: Any = None,
        config: Mapping[str, Any] | None = None,
        hook: Any = None,
        build: Callable[..., Any] | None = None,
        rewards: Any = None,
        subscribe: Callable[[Any], None] | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.seed = seed
        self.rng = random.Random(seed)
        self.registry = registry
        self.config = dict(config or {})
        self.hook = hook
        self.build = build
        self.rewards = rewards
        self._subscribe = subscribe
        self.extras = dict(extras or {})

    def subscribe(self, component: Any) -> None:
        """Register a component as a plugin for this run, so that its ``@hookimpl`` methods
        (``unstable_game_end(self, ctx)``, ...) receive lifecycle hooks. Unregistered when the
        run ends. Outside a run (no loop) this does nothing."""
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


class InferenceSpec(ComponentSpec):
    kind: ClassVar[str] = "inference"


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
class ModelSampler(Protocol):
    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        """Pick `num_seats` opponents to sit with `anchor` (the current checkpoint, or in a
        tournament a uniformly drawn agent)."""
        ...


@runtime_checkable
class Rater(Protocol):
    def update(self, result: GameResult, registry: Any) -> None:
        """Update ratings after a finished game."""
        ...

    def ratings(self, registry: Any) -> dict[str, dict[str, float]]:
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
    capacity: int

    def add(self, result: GameResult) -> int:
        """Add the trained seats of a finished game; return how many steps were stored."""
        ...

    def size(self) -> int: ...

    def draw(self, n: int, learner_version: int) -> Batch:
        """Remove and return about n steps (without replacement), sampling transforms applied."""
        ...


@runtime_checkable
class Learner(Protocol):
    """``version`` counts updates made. A learner that sets ``blocking = True`` is trained in a
    worker thread by the local executor, so games keep being played during an update."""

    version: int

    def update(self, batch: Batch) -> dict[str, float]:
        """Make exactly one policy update from the batch; return metrics."""
        ...

    def save_checkpoint(self, directory: str, uid: str) -> Checkpoint:
        """Write the trainable state atomically under `directory`."""
        ...


@runtime_checkable
class Inference(Protocol):
    """Optional extras a backend may offer: ``tokenizer`` (templates use its chat template) and
    ``check_model(ref)`` (raise ValueError for a model it cannot serve; called before a run)."""

    async def generate(self, request: GenerationRequest) -> Completion:
        """Complete one prompt. Backends batch concurrent calls themselves."""
        ...

    def load_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Make a new checkpoint servable (no-op for backends without weights)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Executor(Protocol):
    def run(self, loop: Any) -> Any:
        """Run the loop's stages (collect, ingest, train) to completion."""
        ...


@runtime_checkable
class Tracker(Protocol):
    """Receives the run's metrics records. A tracker that also wants one ``game`` record per game
    sets an attribute ``wants_game_records = True`` (the loop builds them only then)."""

    def log(self, record: dict[str, Any]) -> None:
        """Record one metrics record (has a 'type' key)."""
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
