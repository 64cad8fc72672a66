"""Where a game's env calls run: on the event loop, or on worker threads.

Every game in flight shares the rollout's event loop, so an env call that takes long (a slow
``step``, a judge call, a blocking read) stalls every other game until it returns. An env call
on a worker thread lets the loop go on: a blocked call waits without holding anything, and a
CPU-bound one gives up the GIL every few milliseconds, so the other games keep moving.
A thread hop costs tens of microseconds a call, about a tenth of a fast TextArena turn, so by
default (``auto``) envs are called on the loop until an env id's calls are seen to take longer
than ``slow_s`` ``slow_calls`` times within a window of ``window_calls`` of its calls; from then
on that env id's calls run on threads. The window is what tells a slow env from a busy machine:
on 2 shared cores a fast call now and then takes over 20 ms (the process was descheduled, or
waited for the GIL), and counted over a whole run such calls once moved every env to threads
within seconds, and a rollout played a third fewer games/s (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

T = TypeVar("T")

EnvCallMode = Literal["auto", "loop", "threads"]
ENV_THREADS = 16  # worker threads of one rollout role for env calls
SLOW_CALLS = 3  # slow calls of an env id on the loop, within one window, that move its calls to threads
WINDOW_CALLS = 1000  # an env id's calls on the loop over which its slow calls are counted


class EnvCalls:
    def __init__(self, mode: EnvCallMode = "auto", slow_s: float = 0.02, threads: int = ENV_THREADS,
                 slow_calls: int = SLOW_CALLS, window_calls: int = WINDOW_CALLS) -> None:
        self.mode = mode
        self.slow_s = slow_s
        self.slow_calls_to_move = slow_calls
        self.window_calls = window_calls
        self.threads = threads
        self.slow_envs: set[str] = set()  # env ids whose calls now run on threads
        self.slow_calls: dict[str, int] = {}  # slow calls on the loop in the current window, by env id
        self.loop_calls: dict[str, int] = {}  # calls on the loop in the current window, by env id
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._idle = 0  # worker threads free to take a call without waiting
        self._lock = threading.Lock()

    def threaded(self, env_id: str) -> bool:
        """Whether this env id's calls go to a thread."""
        return self.mode == "threads" or (self.mode == "auto" and env_id in self.slow_envs)

    def slow_after(self) -> float:
        """Seconds after which a call on the loop is slow (infinite unless the mode is ``auto``)."""
        return self.slow_s if self.mode == "auto" else float("inf")

    def mark_slow(self, env_id: str) -> bool:
        """An env id's call on the loop was slow. At the ``slow_calls``-th such call of a window its
        calls run on threads from now on (return True). The first ones are let pass: a first
        ``make`` imports the game's modules (textarena's take a second), and on a busy machine, or
        in a process that shares the GIL with busy threads of its own (a Ray actor's), a fast
        call is now and then slow."""
        self.slow_calls[env_id] = count = self.slow_calls.get(env_id, 0) + 1
        if count < self.slow_calls_to_move:
            return False
        self.slow_envs.add(env_id)
        return True

    def played(self, env_id: str, calls: int) -> None:
        """A game made ``calls`` timed env calls on the loop; a window that is full starts anew."""
        self.loop_calls[env_id] = count = self.loop_calls.get(env_id, 0) + calls
        if count >= self.window_calls:
            self.loop_calls[env_id] = self.slow_calls[env_id] = 0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread, awaited."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        with self._lock:  # an idle worker takes the call, or a new one (up to ``threads``)
            if self._idle:
                self._idle -= 1
                start = False
            else:
                start = len(self._workers) < self.threads
        self._calls.put((fn, args, loop, done))
        if start:
            worker = threading.Thread(target=self._work, name="unstable-env", daemon=True)
            self._workers.append(worker)
            worker.start()
        return await done

    def _work(self) -> None:
        # daemon threads: an env call that never returns cannot keep the process from exiting
        # (a ThreadPoolExecutor's threads are joined at exit)
        while (call := self._calls.get()) is not None:
            fn, args, loop, done = call
            try:
                outcome, value = True, fn(*args)
            except BaseException as exc:  # handed to the awaiting game, which fails with it
                outcome, value = False, exc
            try:
                loop.call_soon_threadsafe(_settle, done, outcome, value)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
            with self._lock:
                self._idle += 1

    def close(self) -> None:
        """Stop the worker threads once their calls return (a call still running finishes on its own)."""
        for _ in self._workers:
            self._calls.put(None)
        self._workers.clear()


def _settle(done: asyncio.Future[Any], outcome: bool, value: Any) -> None:
    if done.done():  # the game was cancelled
        return
    if outcome:
        done.set_result(value)
    else:
        done.set_exception(value)
