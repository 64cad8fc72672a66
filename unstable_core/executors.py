"""What an executor author needs: the run's plan, the four role handles the driver awaits, and
how to build a role where it runs.

An executor is placement only. ``Executor.start(plan)`` builds the roles of a ``RunPlan`` where
they run (``build_role(role, plan, plugins)`` in that process) and returns ``RoleHandles``: one
handle per role whose methods are exactly the coroutines below. The driver awaits them and
nothing else, so these protocols are the whole contract between the driver and an executor
(``ExecutorContract`` checks an executor's handles against them). With the ``local`` executor
the handles are the role objects themselves; ``unstable-ray`` hands out actor proxies.

    from unstable_core.executors import RoleHandles, build_role

    class MyExecutor:
        def start(self, plan):
            league = build_role("league", plan, self.plugins)
            ...
            return RoleHandles(league=league, rollouts=[...], buffer=..., learner=...)

An executor that restarts a role whose worker died says so with ``report_restart(role, cause,
restarts, max_restarts, pid)``: the run writes a ``restart`` record (metrics.jsonl, every
tracker, the console's one line) and counts it in its summaries.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .lazy import lazy_names

if TYPE_CHECKING:  # pragma: no cover
    from .plugin_loading import PluginRecipe
    from .runtime.plan import Recipe, RunPlan
    from .runtime.roles.start import build_role
    from .types import Batch, Checkpoint, EnvSpec, GameResult, GameSpec, ModelRef


@runtime_checkable
class StatefulRole(Protocol):
    """A role whose state a run snapshot holds (resume loads it into a freshly built role)."""

    async def state_dict(self) -> dict[str, Any]: ...

    async def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class LeagueHandle(StatefulRole, Protocol):
    """The league: model registry, rater, env sampler and model sampler."""

    async def schedule(self, n: int, mode: str) -> list[GameSpec]:
        """``n`` game specs of ``mode`` ("train" or "tournament"): fewer (or none) when a
        tournament is used up."""
        ...

    async def record(self, results: list[GameResult]) -> None:
        """Take finished games in: match counts, ratings, the subscribed components' hooks."""
        ...

    async def add_checkpoint(self, checkpoint: Checkpoint) -> ModelRef:
        """Register a learner checkpoint; it becomes the current model."""
        ...

    async def current(self) -> ModelRef | None:
        """The model being trained, at its latest checkpoint (None in a tournament)."""
        ...

    async def fixed(self) -> list[ModelRef]:
        """The fixed opponents (the evaluation's opponents)."""
        ...

    async def eval_specs(self, step: int) -> tuple[ModelRef | None, list[GameSpec]]:
        """The evaluated model and the games of the evaluation round at learner step ``step``."""
        ...

    async def population(self) -> list[ModelRef]:
        """The base model and every checkpoint, oldest first."""
        ...

    async def wants_payoffs(self) -> bool:
        """The model sampler reads exact payoffs between checkpoints (``ModelSamplerSpec.exact_payoffs``)."""
        ...

    async def record_payoffs(self, uid: str, payoffs: dict[str, float]) -> None:
        """``uid``'s exact expected reward against each of the others (a sampler's ``exact_payoffs``)."""
        ...

    async def least_exploitable_members(self) -> list[ModelRef]:
        """The models whose least exploitable mixture the model sampler reads now (a sampler's
        ``least_exploitable``); [] for none."""
        ...

    async def record_least_exploitable(self, uids: list[str], weights: list[float]) -> None:
        """The weights of the least exploitable mixture of ``uids``."""
        ...

    async def mixtures(self, names: Sequence[str]) -> dict[str, list[tuple[ModelRef, float]]]:
        """The population's mixtures by name ('uniform': every checkpoint alike; 'meta': the model
        sampler's, when it keeps one) as (model, weight) lists."""
        ...

    async def snapshot(self) -> dict[str, Any]:
        """The registry as JSON (models, counts, pairs, current) with the rater's ``ratings``."""
        ...


@runtime_checkable
class RolloutHandle(Protocol):
    """One rollout replica: env provider, templates, inference backends and the game runner."""

    async def play(self, specs: list[GameSpec]) -> list[GameResult]:
        """Play the games concurrently; results in the specs' order; a game that raises fails
        with its reason, never the batch."""
        ...

    async def set_policy(self, checkpoint: Checkpoint) -> int:
        """Serve ``checkpoint`` in the trained model's backend; return the version it serves."""
        ...

    async def policy_metrics(self, model: ModelRef, env: EnvSpec) -> dict[str, float]:
        """The exact policy metrics of ``model`` on ``env`` its provider offers (e.g. exploitability);
        empty when it offers none."""
        ...

    async def mixture_metrics(self, members: list[tuple[ModelRef, float]], env: EnvSpec) -> dict[str, float]:
        """The same for the mixture that draws one of ``members`` per game with its weight;
        empty when the provider scores no mixtures."""
        ...

    async def expected_payoffs(self, row: ModelRef, columns: list[ModelRef], envs: list[EnvSpec]) -> list[float]:
        """``row``'s exact expected reward against each of ``columns``, the mean over ``envs``
        (their providers offer ``ExactPayoffs``)."""
        ...

    async def least_exploitable_mixture(self, members: list[ModelRef], env: EnvSpec) -> list[float]:
        """The weights of the least exploitable mixture of ``members`` on ``env`` (its provider
        offers ``LeastExploitable``)."""
        ...

    async def sleep(self) -> None:
        """The trained model's backend hands its accelerator memory back (``training.colocate``)."""
        ...

    async def wake(self) -> None:
        """The trained model's backend takes its memory back and serves again."""
        ...


@runtime_checkable
class BufferHandle(StatefulRole, Protocol):
    """The reward pipelines and the buffer."""

    async def add(self, results: list[GameResult]) -> int:
        """Store the trained seats of finished training games (final and step transforms
        applied); return the steps stored."""
        ...

    async def draw(self, n: int, learner_version: int) -> Batch:
        """Take ``n`` steps out, sampling transforms applied, and drop the steps the learner
        declared useless (``LearnerSpec.drop_zero_advantage``), counted in ``Batch.dropped``."""
        ...

    async def size(self) -> int: ...

    async def capacity(self) -> int: ...


@runtime_checkable
class LearnerHandle(StatefulRole, Protocol):
    """The learner."""

    async def update(self, batch: Batch) -> dict[str, float]:
        """One policy update; return its metrics (numbers only)."""
        ...

    async def save(self, directory: str, uid: str) -> Checkpoint:
        """Write the current policy as checkpoint ``uid`` under ``directory``."""
        ...


#: role name -> the protocol its handle satisfies
ROLE_PROTOCOLS: dict[str, type] = {
    "league": LeagueHandle, "rollout": RolloutHandle, "buffer": BufferHandle, "learner": LearnerHandle,
}


@dataclass
class RoleHandles:
    """What ``Executor.start(plan)`` returns: the handles whose methods the driver awaits."""

    league: LeagueHandle
    rollouts: list[RolloutHandle]
    buffer: BufferHandle
    learner: LearnerHandle | None = None

    def problems(self) -> list[str]:
        """What in these handles breaks the contract: a missing replica, a handle that lacks a
        protocol's method or offers it as a plain function (the driver awaits every call)."""
        import inspect

        found: list[str] = []
        if not self.rollouts:
            found.append("rollouts: no rollout replica")
        handles: list[tuple[str, str, object]] = [("league", "league", self.league), ("buffer", "buffer", self.buffer)]
        handles += [(f"rollouts[{i}]", "rollout", r) for i, r in enumerate(self.rollouts)]
        if self.learner is not None:
            handles.append(("learner", "learner", self.learner))
        for where, role, handle in handles:
            protocol = ROLE_PROTOCOLS[role]
            for method in sorted(m for m in dir(protocol) if not m.startswith("_")):
                fn = getattr(handle, method, None)
                if fn is None:
                    found.append(f"{where}: {type(handle).__name__} has no {method}() of {protocol.__name__}")
                elif not inspect.iscoroutinefunction(fn):
                    found.append(f"{where}: {type(handle).__name__}.{method} is not a coroutine function "
                                 f"({protocol.__name__} methods are awaited)")
        return found


@dataclass(frozen=True)
class RoleRestart:
    """A role whose worker died and was started anew by the executor."""

    role: str
    cause: str
    restarts: int
    max_restarts: int
    pid: int | None = None


#: the running run's receiver of restarts (set by the run for the tasks and threads it starts)
restart_sink: contextvars.ContextVar[Callable[[RoleRestart], None] | None] = contextvars.ContextVar(
    "unstable_restart_sink", default=None)


def report_restart(role: str, cause: str, restarts: int, max_restarts: int, pid: int | None = None) -> None:
    """Tell the run that ``role``'s worker died (``cause``, one line) and a new one is starting:
    the ``restarts``-th of the ``max_restarts`` the executor allows. Call it from the driver's
    event loop or a thread it started (where the run's context is); outside a run it is logged."""
    event = RoleRestart(role=role, cause=cause, restarts=restarts, max_restarts=max_restarts, pid=pid)
    sink = restart_sink.get()
    if sink is None:
        logging.getLogger("unstable").warning("%s died (%s); restarting it (%d of %d)", role, cause, restarts, max_restarts)
    else:
        sink(event)


_LAZY = {"RunPlan": "runtime.plan", "Recipe": "runtime.plan", "build_role": "runtime.roles.start",
         "PluginRecipe": "plugin_loading"}


_lazy = lazy_names(__name__, _LAZY)


def __getattr__(name: str) -> Any:
    return _lazy(name)


__all__ = ["LeagueHandle", "RolloutHandle", "BufferHandle", "LearnerHandle", "ROLE_PROTOCOLS", "RoleHandles",
           "RoleRestart", "report_restart", "restart_sink",
           "RunPlan", "Recipe", "build_role", "PluginRecipe"]
