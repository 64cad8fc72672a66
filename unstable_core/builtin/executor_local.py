"""executor `local`: every role in this process, on the driver's asyncio event loop."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from .. import hookimpl
from ..components import ExecutorSpec


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocalExecutor:
    """In-process handles: the driver awaits the roles' methods directly, so games in flight
    interleave at every inference call and a batching backend serves them together; a learner
    that declares ``blocking`` trains in a worker thread while games go on."""

    def __init__(self, plugins: Any) -> None:
        self.plugins = plugins
        self.rollouts: list[Any] = []

    def start(self, plan: Any) -> Any:
        from ..runtime.roles import RoleHandles, build_role

        league = build_role("league", plan, self.plugins)
        buffer = build_role("buffer", plan, self.plugins)
        learner = build_role("learner", plan, self.plugins) if plan.trains else None
        self.rollouts = [build_role("rollout", plan, self.plugins)]
        return RoleHandles(league=league, rollouts=self.rollouts, buffer=buffer, learner=learner)

    def shutdown(self) -> None:
        for rollout in self.rollouts:
            rollout.close()
        self.rollouts = []


@hookimpl
def unstable_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec(name="local", summary="Every role in one process (asyncio)", config=LocalOptions,
                         factory=lambda o, ctx: LocalExecutor(ctx.plugins))]
