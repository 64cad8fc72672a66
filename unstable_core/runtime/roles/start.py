"""The four roles of a run, by name; how an executor builds one where it runs (``build_role``);
and how the driver has the executor start them without blocking its event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from ...errors import PluginError, UnstableError, describe_error
from ...executors import RoleHandles
from ...plugins import PluginSystem
from ...protocols import Executor
from ..plan import RunPlan
from .buffer import BufferRole
from .league import League
from .learner import LearnerRole
from .rollout import Rollout

ROLES: dict[str, type[League | Rollout | BufferRole | LearnerRole]] = {"league": League, "rollout": Rollout, "buffer": BufferRole, "learner": LearnerRole}


def build_role(role: str, plan: RunPlan, plugins: PluginSystem) -> League | Rollout | BufferRole | LearnerRole:
    """Build one role of ``plan`` in this process, from its recipes, with ``plugins`` (the
    process's ``PluginSystem``). Executors call this where the role runs."""
    return ROLES[role](plan, plugins)


async def start_roles(executor: Executor, plan: RunPlan, label: str = "executor") -> RoleHandles:
    """``executor.start(plan)`` in a thread of its own: building the roles may load or build
    models for minutes, and the event loop must handle Ctrl-C meanwhile. A run stopped while its
    roles are built does not wait for the build (as ``asyncio.to_thread`` would, its thread pool
    being joined when the loop closes): the thread goes on alone, and shuts down what it built.

    What the executor returns is checked against the role protocols (``RoleHandles.problems``);
    ``label`` names the executor in the error."""
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
        roles = await asyncio.wrap_future(built)
    except asyncio.CancelledError:
        # either the build is still going (cancelled here: the thread shuts down what it builds)
        # or it has just ended (its roles are shut down here)
        if not built.cancel() and built.exception() is None:
            executor.shutdown()
        raise
    except UnstableError:
        raise
    except Exception as exc:  # an executor's own failure: named, not a traceback
        raise PluginError(f"{label}: start() raised {describe_error(exc)}") from exc
    if not isinstance(roles, RoleHandles):
        raise PluginError(f"{label}: start() returned {type(roles).__name__}; expected RoleHandles")
    problems = roles.problems()
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PluginError(f"{label}: start() returned handles that break the role contract: {problems[0]}{more}")
    return roles
