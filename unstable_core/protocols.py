"""Protocols: what a component factory's product must offer, one per kind (each named in
``components.KINDS``).

A factory registered in a spec record (``components.py``) returns an object that satisfies its
kind's protocol; the core checks it with ``isinstance`` when it builds the component and names
the plugin and the protocol when it does not.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from .types import Batch, Checkpoint, Completion, EnvSpec, GameResult, GenerationRequest, ModelRef, Step


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
class LegalActions(Protocol):
    """What a game whose provider's record declares ``legal_actions`` also offers."""

    def legal_actions(self) -> list[str]:
        """The labels of the actions open to the player ``observe`` named, each as the env reads it
        in a boxed answer (``[bet]``): ``collection.answers = "choice"`` offers exactly these."""
        ...


@runtime_checkable
class EnvProvider(Protocol):
    def make(self, env: EnvSpec) -> GameEnv: ...

    def known_env_ids(self) -> list[str]:
        """Ids known to work on this machine (for `unstable envs list`)."""
        ...


#: (observation, action labels) -> the probability the policy answers each label
ActionProbabilities = Callable[[str, list[str]], list[float]]


@runtime_checkable
class PolicyMetrics(Protocol):
    """What an env provider whose record declares ``policy_metrics`` also offers."""

    def policy_metrics(self, env: EnvSpec, probabilities: ActionProbabilities) -> dict[str, float]:
        """Exact figures of the policy ``probabilities`` describes on ``env`` (e.g. exploitability):
        the provider enumerates the game's information states, renders each as the observation a
        player sees, and asks for the probability of each legal action's label."""
        ...


@runtime_checkable
class MixtureMetrics(Protocol):
    """What an env provider that also scores mixtures of policies offers (``collection.eval_mixtures``)."""

    def mixture_metrics(self, env: EnvSpec, members: list[tuple[float, ActionProbabilities]]) -> dict[str, float]:
        """Exact figures of the mixture that draws one member per game with the given weights
        (they sum to 1): what a player plays that picks one of the policies per game."""
        ...


@runtime_checkable
class ExactPayoffs(Protocol):
    """What an env provider that computes exact expected payoffs between policies offers
    (model samplers whose record declares ``exact_payoffs``: psro's ``payoff = "exact"``)."""

    def expected_payoffs(self, env: EnvSpec, row: ActionProbabilities, columns: list[ActionProbabilities]) -> list[float]:
        """``row``'s expected reward against each of ``columns``, the mean over the seats it may take."""
        ...


@runtime_checkable
class LeastExploitable(Protocol):
    """What an env provider that finds the least exploitable mixture of policies offers (model
    samplers whose record declares ``least_exploitable``: psro's ``meta_solver = "least"``)."""

    def least_exploitable_mixture(self, env: EnvSpec, members: list[ActionProbabilities]) -> list[float]:
        """The weights (summing to 1) of the mixture of ``members``, one drawn per game, with the
        lowest exploitability on ``env``."""
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
    and (wins of a, draws, wins of b), ``mean_reward(a, b)`` a's mean reward in those games
    (None if none), ``win_rate(a, b, prior=0, lineage=0)`` a's win rate against b, draws half,
    with ``prior`` pseudo-games of even result and the games of the ``lineage`` checkpoints before
    a pooled in (``lineage(uid, window)``: uid and those checkpoints, newest first; None when it
    counts nothing), ``exact_payoff(a, b)`` a's exact expected reward against b (None unless
    the run computes them: a sampler whose record declares ``exact_payoffs``), and
    ``least_exploitable(uids)`` the weights of the least exploitable mixture of those models (None
    unless the run computed it for exactly them: a sampler whose record declares
    ``least_exploitable`` names them, ``LeastExploitableSampler``). Samplers only read it; the league counts the games."""

    entries: dict[str, Any]

    @property
    def current(self) -> ModelRef | None: ...

    def get(self, uid: str) -> Any: ...

    def fixed(self) -> list[ModelRef]: ...

    def checkpoints(self, include_base: bool = True) -> list[ModelRef]: ...

    def active_checkpoints(self, limit: int | None = None) -> list[ModelRef]: ...

    def match_count(self, a: str, b: str) -> int: ...

    def head_to_head(self, a: str, b: str) -> tuple[int, int, int]: ...

    def mean_reward(self, a: str, b: str) -> float | None: ...

    def lineage(self, uid: str, window: int = 0) -> list[str]: ...

    def win_rate(self, a: str, b: str, *, prior: float = 0.0, lineage: int = 0) -> float | None: ...

    def exact_payoff(self, a: str, b: str) -> float | None: ...

    def least_exploitable(self, uids: list[str]) -> list[float] | None: ...


@runtime_checkable
class ModelSampler(Protocol):
    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Registry, rng: random.Random) -> list[ModelRef]:
        """Pick `num_seats` opponents to sit with `anchor` (the current checkpoint, or in a
        tournament a uniformly drawn agent)."""
        ...


@runtime_checkable
class PopulationMixture(Protocol):
    """A model sampler that targets a mixture of the population (psro's meta-game Nash mixture)."""

    def mixture(self) -> dict[str, float]:
        """uid -> probability of the mixture it draws from now (empty before it has one). A
        ``mixture(self, registry)`` (a parameter named ``registry``) is handed the league's
        registry, for a mixture computed from pair results."""
        ...


@runtime_checkable
class LeastExploitableSampler(Protocol):
    """A model sampler that reads the least exploitable mixture of some of the population
    (``registry.least_exploitable``; its record declares ``least_exploitable``)."""

    def least_exploitable_members(self, registry: Registry) -> list[str]:
        """The uids whose least exploitable mixture the run should compute now (after a new
        checkpoint's exact payoffs are recorded); [] for none."""
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
    """Game rewards by player id to new ones. A transform whose call also takes a keyword
    ``train_seats`` (``role-advantage``) is given the seats the learner's model played."""

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
class CompletionScorer(Protocol):
    """What a backend whose record declares ``scores_completions`` also offers."""

    def completion_probabilities(self, request: GenerationRequest, completions: list[str]) -> list[float]:
        """The exact probability that ``generate(request)`` returns each completion text, under the
        sampling settings it plays with (the rest of the mass goes to other texts)."""
        ...


@runtime_checkable
class MemoryReleaser(Protocol):
    """What a backend whose record declares ``releases_memory`` also offers (``training.colocate``)."""

    def sleep(self) -> None:
        """Hand back the accelerator memory the backend's models hold (offload weights, drop
        caches); no request arrives until ``wake``."""
        ...

    def wake(self) -> None:
        """Take the memory back: the next request is served as before the sleep."""
        ...


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
    """Receives the run's metrics records (``unstable_core.records``). Whether it also gets one
    ``GameRecord`` per game, or a ``TranscriptRecord`` for each game whose transcript is written
    (``collection.transcripts``: a seeded sample), its ``TrackerSpec`` declares
    (``game_records``, ``transcripts``): the driver builds those records only for trackers that
    want them."""

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
