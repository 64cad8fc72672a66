"""The rollout role: env provider, templates, inference backends and the game runner.

``play(specs)`` plays a batch of games concurrently on one event loop, so that a batching
backend serves every game in flight together (in sync mode in turn rounds, ``lockstep.py``); ``set_policy(checkpoint)`` hands a new checkpoint
to the backend of the model being trained, which confirms the version it now serves.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import RunFailed
from ..types import Checkpoint, GameResult, GameSpec
from .envcalls import EnvCalls
from .lockstep import Lockstep
from .plan import Builder, RunPlan, guarded
from .runner import GameRunner


class _Batch:
    """One ``play`` call: its results by position, how many are left, and its future."""

    __slots__ = ("results", "left", "done", "cancelled")

    def __init__(self, n: int, done: asyncio.Future[list[GameResult]]) -> None:
        self.results: list[Any] = [None] * n
        self.left = n
        self.done = done
        self.cancelled = False


class Rollout:
    def __init__(self, plan: RunPlan, system: Any) -> None:
        cfg = plan.config
        self.builder = builder = Builder(plan, system)
        self.trained_backend = cfg.inference.name
        self.env_provider = builder.build("env")
        self._templates: dict[str, Any] = {}
        self._backends: dict[str, Any] = {}
        self._queue: asyncio.Queue[tuple[_Batch, int, GameSpec]] = asyncio.Queue()
        self._workers: list[asyncio.Future[None]] = []
        self._idle = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the workers run on
        collection = cfg.collection
        self.env_calls = EnvCalls(collection.env_calls, collection.slow_env_call_ms / 1000)
        self.lockstep = Lockstep() if collection.mode == "sync" else None
        self.runner = GameRunner(
            self.env_provider, self.template, self.backend, collection.max_turns, collection.max_action_chars, self.env_calls,
            self.lockstep,
        )
        # build every backend a seat can name now: a broken one fails before the first game
        for ref in [o.ref() for o in cfg.opponents] + ([cfg.model_ref()] if cfg.model is not None else []):
            self.backend(ref.backend)

    def template(self, name: str) -> Any:
        template = self._templates.get(name)
        if template is None:
            template = self._templates[name] = self.builder.named("template", name)
        return template

    def backend(self, name: str) -> Any:
        backend = self._backends.get(name)
        if backend is None:
            key = "inference" if name == self.trained_backend else f"backends.{name}"
            backend = self._backends[name] = self.builder.build(key)
        return backend

    async def play(self, specs: list[GameSpec]) -> list[GameResult]:
        """Play the games concurrently; a game that raises fails with its reason, never the batch.

        Games are played by persistent worker coroutines that pull from a queue (one more is
        started whenever more games wait than workers are idle), so a batch costs no task per
        game, and a game whose agents answer at once runs to its end without a task switch."""
        if not specs:
            return []
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # workers and queue belong to one event loop (a second asyncio.run)
            self._loop, self._queue, self._workers, self._idle = loop, asyncio.Queue(), [], 0
        batch = _Batch(len(specs), loop.create_future())
        if self.lockstep is not None:
            self.lockstep.expect(len(specs))
        for i, spec in enumerate(specs):
            self._queue.put_nowait((batch, i, spec))
        while self._idle < self._queue.qsize():
            self._idle += 1
            self._workers.append(asyncio.ensure_future(self._work()))
        try:
            return await batch.done
        finally:
            batch.cancelled = not batch.done.done()  # its queued games are skipped

    async def _work(self) -> None:
        queue, play = self._queue, self.runner.play
        while True:
            batch, i, spec = await queue.get()
            if batch.cancelled:
                if self.lockstep is not None:
                    self.lockstep.leave()
                continue
            self._idle -= 1
            try:
                batch.results[i] = await play(spec)
            except Exception as exc:  # the runner fails games, it does not raise: a bug
                if not batch.done.done():
                    batch.done.set_exception(exc)
            finally:
                self._idle += 1
                if self.lockstep is not None:
                    self.lockstep.leave()
            batch.left -= 1
            if batch.left == 0 and not batch.done.done():
                batch.done.set_result(batch.results)

    async def set_policy(self, checkpoint: Checkpoint) -> int:
        """Load a new checkpoint in the trained model's backend; return the version it serves."""
        backend = self.backend(self.trained_backend)
        label = self.builder.label("inference")
        served = await asyncio.to_thread(guarded, label, "load_checkpoint", backend.load_checkpoint, checkpoint)  # may load weights
        if served != checkpoint.version:
            raise RunFailed(
                f"{label}: after load_checkpoint({checkpoint.uid!r}) it serves version {served!r}, not {checkpoint.version}"
            )
        return served

    def close(self) -> None:
        for worker in self._workers:
            worker.cancel()
        self._workers.clear()
        self.env_calls.close()
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:
                pass
