"""The four roles of a run, by name, and how an executor builds one where it runs."""

from __future__ import annotations

import asyncio
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


def first_error(group: BaseExceptionGroup) -> BaseException:
    """The first error in a (nested) exception group that is not a cancellation."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            exc = first_error(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group.exceptions[0]
