"""The four roles of a run, by name, and how an executor builds one where it runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any

from .league import League
from .learning import LearnerRole
from .plan import RunPlan
from .replay import BufferRole
from .rollout import Rollout

ROLES: dict[str, type] = {"league": League, "rollout": Rollout, "buffer": BufferRole, "learner": LearnerRole}


def build_role(role: str, plan: RunPlan, plugins: Any) -> Any:
    """Build one role of ``plan`` in this process, from its recipes, with ``plugins`` (the
    process's ``PluginSystem``). Executors call this where the role runs."""
    return ROLES[role](plan, plugins)


@dataclass
class RoleHandles:
    """What an executor's ``start(plan)`` returns: handles whose methods the driver awaits (the
    role objects themselves with the local executor)."""

    league: Any
    rollouts: list[Any]
    buffer: Any
    learner: Any | None = None


async def start_roles(executor: Any, plan: RunPlan) -> RoleHandles:
    """``executor.start(plan)`` in a thread of its own: building the roles may load or build
    models for minutes, and the event loop must handle Ctrl-C meanwhile. A run stopped while its
    roles are built does not wait for the build (as ``asyncio.to_thread`` would, its thread pool
    being joined when the loop closes): the thread goes on alone, and shuts down what it built."""
    built: concurrent.futures.Future[RoleHandles] = concurrent.futures.Future()

    def build() -> None:
        try:
            roles = executor.start(plan)
        except BaseException as exc:
            try:
                built.set_exception(exc)
            except concurrent.futures.InvalidStateError:  # the run stopped meanwhile
                pass
            return
        try:
            built.set_result(roles)
        except concurrent.futures.InvalidStateError:  # the run stopped meanwhile: nobody will use them
            executor.shutdown()

    threading.Thread(target=build, name="unstable-start-roles", daemon=True).start()
    try:
        return await asyncio.wrap_future(built)
    except asyncio.CancelledError:
        # either the build is still going (cancelled here: the thread shuts down what it builds)
        # or it has just ended (its roles are shut down here)
        if not built.cancel() and built.exception() is None:
            executor.shutdown()
        raise


def first_error(group: BaseExceptionGroup) -> BaseException:
    """The first error in a (nested) exception group that is not a cancellation."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            exc = first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]
