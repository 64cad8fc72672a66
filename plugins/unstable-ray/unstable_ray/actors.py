"""The actor that holds one role of a run, and the handles through which the driver awaits it.

A ``RoleActor`` is an async Ray actor, one class a role (``LeagueActor``, ``BufferActor``,
``LearnerActor``, ``RolloutActor``: what ``ps`` shows, ``ray::RolloutActor.play``): it builds its role with the driver's plugins (loaded from
the plugin system's picklable recipe), then serves ``call(method, *args)``; coroutines run on the
actor's event loop, so a rollout plays every game of its batches concurrently and nothing blocks
(a blocking learner trains in a worker thread, as in-process).

A ``RoleHandle`` turns ``await handle.update(batch)`` into one actor call. An error the role
raised comes back as itself (a ComponentError names its component, as with the local executor);
an actor that died fails the run, naming the role and the cause. A ``RolloutActorHandle`` restarts a
dead rollout actor instead (up to the executor's ``max_restarts``), publishes the last checkpoint
to the new one and plays the lost games again; the run records the restart (``report_restart``:
one line on the console, a ``restart`` record). Ray's own account of a death only with
``--verbose``.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from unstable_core import Checkpoint, RunFailed
from unstable_core.executors import build_role, report_restart
from unstable_core.progress import verbose

from . import wire

log = logging.getLogger("unstable.ray")


class RoleActor:
    """One role, built in this worker process (``ACTOR_CLASSES``: a Ray actor class a role)."""

    def __init__(self) -> None:
        self.role: Any = None
        self.local: dict[str, str] = {}  # checkpoint path on the driver's node -> its copy here

    async def build(self, role: str, plan: Any, plugins: Any) -> int:
        """Build ``role`` of ``plan`` with the plugins ``plugins`` (a ``PluginRecipe``) loads."""
        self.role = build_role(role, plan, plugins.load())
        # what exists now (Ray's and the plugins' modules, models, tokenizers) lives as long as
        # the actor: out of the collector's way (the gain: docs/performance.md, bench/ray_rollout.py)
        gc.freeze()
        return os.getpid()

    async def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()

    async def call(self, method: str, args: Any) -> Any:
        """``role.method(*args)``, arguments and result packed (wire.py)."""
        result = getattr(self.role, method)(*wire.unpack(args))
        if inspect.isawaitable(result):
            result = await result
        return wire.pack(result)

    async def pack(self, path: str) -> dict[str, bytes]:
        """The files of a checkpoint this actor (the learner's) wrote, for other nodes."""
        return checkpoint_files(path)

    async def receive(self, checkpoint: Checkpoint, files: dict[str, bytes]) -> str:
        """Write a checkpoint sent as bytes to this node's disk; return where."""
        directory = self.local.get(checkpoint.path)
        if directory is None:
            directory = tempfile.mkdtemp(prefix=f"unstable-{checkpoint.uid}-")
            for name, data in files.items():
                path = Path(directory, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            self.local[checkpoint.path] = directory
        return directory

    async def set_policy_from_bytes(self, checkpoint: Checkpoint, files: dict[str, bytes]) -> int:
        """Write a checkpoint sent as bytes to this node's disk, then serve it."""
        directory = await self.receive(checkpoint, files)
        return await self.role.set_policy(checkpoint.model_copy(update={"path": directory}))

    async def play(self, args: Any) -> Any:
        """Play games whose seats may name checkpoints by their path on the driver's node (the
        backends get this node's copies); the results travel without their specs (wire.py)."""
        specs, = wire.unpack(args)
        results = await self.role.play([self._here(spec) for spec in specs] if self.local else specs)
        return wire.pack(wire.without_specs(results))

    def _here(self, spec: Any) -> Any:
        seats = [s.model_copy(update={"adapter_path": self.local[s.adapter_path]}) if s.adapter_path in self.local else s
                 for s in spec.seats]
        return spec.model_copy(update={"seats": seats})

    async def close(self) -> None:
        if self.role is not None and hasattr(self.role, "close"):
            self.role.close()
        for directory in self.local.values():
            shutil.rmtree(directory, ignore_errors=True)


class LeagueActor(RoleActor):
    """The league's actor."""


class BufferActor(RoleActor):
    """The buffer's actor."""


class LearnerActor(RoleActor):
    """The learner's actor."""


class RolloutActor(RoleActor):
    """A rollout replica's actor."""


#: role -> its actor class: the class name is the worker's process title (``ray::RolloutActor.play``)
ACTOR_CLASSES: dict[str, Any] = {"league": ray.remote(LeagueActor), "buffer": ray.remote(BufferActor),
                                 "learner": ray.remote(LearnerActor), "rollout": ray.remote(RolloutActor)}


def checkpoint_files(path: str) -> dict[str, bytes]:
    """Every file under a checkpoint directory, by relative path."""
    root = Path(path)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def original(exc: RayTaskError) -> BaseException:
    """The exception the role raised (Ray wraps it with the remote traceback)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else RunFailed(str(exc).strip().splitlines()[-1])


def death(exc: RayActorError) -> str:
    """Why an actor died, in one short line (Ray's whole account is logged with ``--verbose``)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if verbose():
        log.warning("ray: %s", text)
    reason = text[text.find("The actor is dead because"):] if "The actor is dead because" in text else text
    reason = reason.removeprefix("The actor is dead because ").split(" Some common causes")[0].split(" There are some potential")[0]
    if "Worker exit type:" in reason:  # "its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: ..."
        head, _, rest = reason.partition(" Worker exit type: ")
        kind, _, detail = rest.partition(" Worker exit detail: ")
        reason = f"{head.rstrip('.')} ({kind.strip()}: {detail.strip().rstrip('.')})"
    return (reason or type(exc).__name__).strip()


class RoleHandle:
    """The driver's handle on one role's actor: ``await handle.method(*args)``."""

    def __init__(self, name: str, actor: Any) -> None:
        self.name = name
        self.actor = actor

    def __getattr__(self, method: str) -> Any:
        if method.startswith("_"):
            raise AttributeError(method)

        async def call(*args: Any) -> Any:
            return await self._call(method, *args)

        call.__name__ = method
        return call

    async def _call(self, method: str, *args: Any) -> Any:
        try:
            return wire.unpack(await self.actor.call.remote(method, wire.pack(args)))
        except RayTaskError as exc:
            raise original(exc) from None
        except RayActorError as exc:
            raise RunFailed(
                f"ray executor: the {self.name} actor died ({death(exc)}); the run cannot go on without it. "
                "`unstable run --resume RUN_DIR` goes on from the last snapshot."
            ) from None


class RolloutActorHandle(RoleHandle):
    """A rollout replica's handle: a dead actor is replaced, gets the current checkpoint, and the
    call it broke is made again (a batch of games is played again from the same specs)."""

    def __init__(self, index: int, actor: Any, executor: Any) -> None:
        super().__init__(f"rollout-{index}", actor)
        self.index = index
        self.executor = executor
        self.generation = 0
        self.checkpoint: Checkpoint | None = None
        self._lock = asyncio.Lock()

    async def set_policy(self, checkpoint: Checkpoint) -> int:
        self.checkpoint = checkpoint
        if not self.executor.published or self.executor.published[-1].uid != checkpoint.uid:
            self.executor.published.append(checkpoint)
        return await self._call("set_policy", checkpoint)

    async def _call(self, method: str, *args: Any) -> Any:
        while True:
            generation = self.generation
            try:
                result = wire.unpack(await self._send(method, *args))
                return wire.with_specs(result, args[0]) if method == "play" else result
            except RayTaskError as exc:
                raise original(exc) from None
            except RayActorError as exc:
                await self._restart(generation, death(exc))

    def _send(self, method: str, *args: Any) -> Any:
        if method == "play":
            return self.actor.play.remote(wire.pack(args))
        if method == "set_policy" and not self.executor.options.shared_filesystem:
            return self.actor.set_policy_from_bytes.remote(args[0], self.executor.checkpoint_bytes(args[0]))
        return self.actor.call.remote(method, wire.pack(args))

    async def _restart(self, generation: int, cause: str) -> None:
        async with self._lock:
            if generation != self.generation:  # another call has restarted it already
                return
            executor = self.executor
            limit = executor.options.max_restarts
            if executor.restarts >= limit:
                raise RunFailed(f"ray executor: the {self.name} actor died ({cause}) and the run's max_restarts "
                                f"({limit}) are used up")
            executor.restarts += 1
            report_restart(self.name, cause, executor.restarts, limit, pid=executor.pids.get(self.name))
            self.actor = await asyncio.to_thread(executor.start_rollout, self.index)
            self.generation += 1
            if self.checkpoint is None:
                return
            try:
                if not executor.options.shared_filesystem:  # past checkpoints may be opponents
                    for past in executor.published[:-1]:
                        await self.actor.receive.remote(past, executor.checkpoint_bytes(past))
                served = wire.unpack(await self._send("set_policy", self.checkpoint))
            except RayTaskError as exc:
                raise original(exc) from None
            except RayActorError as exc:
                raise RunFailed(f"ray executor: the restarted {self.name} actor died too ({death(exc)})") from None
            if served != self.checkpoint.version:
                raise RunFailed(f"ray executor: the restarted {self.name} serves version {served!r}, "
                                f"not {self.checkpoint.version}")
