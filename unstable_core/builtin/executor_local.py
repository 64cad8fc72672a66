"""executor `local`: every stage in one process, on one asyncio event loop."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict

from .. import hookimpl
from ..components import ExecutorSpec


class LocalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocalExecutor:
    """Runs ``loop.run()`` with ``asyncio.run``: games in flight interleave at every inference
    call, so a batching backend serves them together; a learner that sets ``blocking = True``
    trains in a worker thread while collection goes on."""

    def run(self, loop: Any) -> Any:
        return asyncio.run(loop.run())


@hookimpl
def unstable_executors() -> list[ExecutorSpec]:
    return [ExecutorSpec(name="local", summary="Every stage in one process (asyncio)", config=LocalOptions, factory=lambda o, ctx: LocalExecutor())]
