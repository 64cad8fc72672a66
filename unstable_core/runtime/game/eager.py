"""Coroutines started at once, in the caller's task: a task only for one that suspends.

``asyncio.ensure_future(coro)`` makes a task that first runs on the event loop's next turn, and
whoever waits for it wakes a turn later still: a few tens of microseconds. A game whose agents
answer at once (scripted ones) and an ingest into in-process roles never suspend, and several
hundred of each run a second in a tournament, so that cost was paid for nothing.
``eager(coro)`` runs ``coro`` in the caller's task until it first suspends: a coroutine that
finishes at once gives a future that is already done, and one that suspends goes on in a task
from where it stopped.

Unlike Python 3.12's eager tasks, the first part runs as the caller's task
(``asyncio.current_task()``), so this is only for coroutines that tie nothing to their task
before they first suspend: ``asyncio.timeout``, anyio's cancel scopes (httpx, the openai client)
and task groups do, and would cancel the caller. The rollout uses it for games whose every seat
is served by a backend that declares it answers at once (``InferenceSpec.answers_at_once``), the
collection for the ingest, whose waits are the roles' own calls.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


def eager(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
    """A future of ``coro``'s result, ``coro`` run now up to its first suspension."""
    loop = asyncio.get_running_loop()
    try:
        pending = coro.send(None)
    except StopIteration as stop:
        done = loop.create_future()
        done.set_result(stop.value)
        return done
    except Exception as exc:  # raised before suspending: the future holds it, as a task's would
        failed = loop.create_future()
        failed.set_exception(exc)
        return failed
    return loop.create_task(_go_on(coro, pending))


async def shielded(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.shield(coro)``: ``coro`` runs to its end even if the caller is cancelled
    meanwhile; one that never suspends costs no task."""
    future = eager(coro)
    if future.done():
        return future.result()
    return await asyncio.shield(future)


async def _go_on(coro: Coroutine[Any, Any, T], pending: Any) -> T:
    return await _resume(coro, pending)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], pending: Any) -> Generator[Any, Any, T]:
    """Hand what ``coro`` waits on to the task running this, and what it gets back to ``coro``."""
    while True:
        try:
            value = yield pending
        except BaseException as exc:  # the task was cancelled, or a future failed: coro sees it
            try:
                pending = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                pending = coro.send(value)
            except StopIteration as stop:
                return stop.value
