"""The four roles of a run, by name, and how an executor builds one where it runs."""

from __future__ import annotations

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
