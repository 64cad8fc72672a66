"""executor `local`: every role in this process, on the driver's asyncio event loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from .. import hookimpl
from ..components import BuildContext, ExecutorSpec

if TYPE_CHECKING:  # pragma: no cover
    from ..executors import RoleHandles
    from ..plugins import PluginSystem
    from ..runtime.plan import RunPlan
    from ..runtime.roles.rollout import Rollout


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocalExecutor:
    """In-process handles: the driver awaits the roles' methods directly, so games in flight
    interleave at every inference call and a batching backend serves them together; a learner
    that declares ``blocking`` trains in a worker thread while games go on."""

    def __init__(self, plugins: PluginSystem) -> None:
        self.plugins = plugins
        self.rollouts: list[Rollout] = []

    def start(self, plan: RunPlan) -> RoleHandles:
        from ..executors import RoleHandles
        from ..runtime.roles.buffer import BufferRole
        from ..runtime.roles.league import League
        from ..runtime.roles.learner import LearnerRole
        from ..runtime.roles.rollout import Rollout

        league = League(plan, self.plugins)
        buffer = BufferRole(plan, self.plugins)
        learner = LearnerRole(plan, self.plugins) if plan.trains else None
        self.rollouts = [Rollout(plan, self.plugins)]
        return RoleHandles(league=league, rollouts=list(self.rollouts), buffer=buffer, learner=learner)

    def shutdown(self) -> None:
        for rollout in self.rollouts:
            rollout.close()
        self.rollouts = []


@hookimpl
def unstable_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec(name="local", summary="Every role in one process (asyncio)", config=LocalOptions,
                         factory=make_local)]


def make_local(options: LocalOptions, ctx: BuildContext) -> LocalExecutor:
    return LocalExecutor(ctx.plugins)
