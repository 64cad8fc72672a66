"""Registers the `ray` executor."""

from __future__ import annotations

from unstable_core import ExecutorSpec, hookimpl

from .environment import check_environment
from .options import RayOptions


def make_executor(options: RayOptions, ctx: object) -> object:
    check_environment()
    from .executor import RayExecutor  # ray is imported only when a run uses it

    return RayExecutor(options, ctx.plugins)  # type: ignore[attr-defined]


@hookimpl
def unstable_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec(name="ray", summary="Every role as a Ray actor, on one machine or a cluster", config=RayOptions,
                         factory=make_executor)]
