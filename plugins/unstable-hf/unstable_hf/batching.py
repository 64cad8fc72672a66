"""Requests from every game in flight, gathered into batches for the worker thread.

A batcher task takes the first request queued, waits up to ``wait_ms`` for more (as
UnstableBaselines' vLLM actor does every 20 ms) or until ``max_size`` arrived, cuts them into
calls (``calls``: one per base model, or per adapter) and runs each call's ``serve`` in a worker
thread, so that the event loop keeps scheduling games meanwhile. A call that raises fails its
own games only; the batcher goes on serving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from unstable_core import Completion, GenerationRequest

Pair = tuple[GenerationRequest, "asyncio.Future[Completion]"]


class RequestBatcher:
    def __init__(self, serve: Callable[[list[GenerationRequest]], list[Completion]],
                 calls: Callable[[list[Pair]], list[list[Pair]]], wait_ms: float, max_size: int) -> None:
        self.serve, self.calls, self.wait_ms, self.max_size = serve, calls, wait_ms, max_size
        self._queue: asyncio.Queue[Pair] | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, request: GenerationRequest) -> Completion:
        """The request's completion, served in a batch with whatever else is queued."""
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:  # queue and task belong to one event loop
            self._loop = loop
            self._queue = asyncio.Queue()
            self._task = None
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run(self._queue))
        future: asyncio.Future[Completion] = loop.create_future()
        await self._queue.put((request, future))
        return await future

    async def _run(self, queue: asyncio.Queue[Pair]) -> None:
        while True:
            pending = [await queue.get()]
            deadline = time.monotonic() + self.wait_ms / 1000
            while len(pending) < self.max_size:
                timeout = deadline - time.monotonic()
                if timeout <= 0:
                    break
                try:
                    pending.append(await asyncio.wait_for(queue.get(), timeout))
                except TimeoutError:
                    break
            for call in self.calls(pending):
                await self._serve_call([(r, f) for r, f in call if not f.done()])

    async def _serve_call(self, live: list[Pair]) -> None:
        if not live:
            return
        try:
            outs: list[Any] = await asyncio.to_thread(self.serve, [r for r, _ in live])
        except Exception as exc:  # fail these games, keep serving
            for _, f in live:
                if not f.done():
                    f.set_exception(exc)
            return
        for (_, f), out in zip(live, outs):
            if not f.done():
                f.set_result(out)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
