"""Test kit: a plugin that kills rollout actors at chosen points of a run, from the driver.

    system = unstable_core.load_plugins(extra=[("killer", RolloutKiller(at_games=(50,)))])
    unstable_core.run(config, plugins=system)   # rollout-0 is killed once 50 games have ended

``ray.kill`` by default; with ``signal`` (e.g. ``signal.SIGKILL``) its worker process gets that
signal, as from ``kill -9`` (the cluster must be on this machine). ``killed_pids`` and ``titles``
(each killed process's command line, ``ray::RolloutActor...``) say whom it killed.

It implements only ``unstable_game_end``, which runs in the driver's process: the actors load it
too (with the run's plugins) but never call it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ray

from unstable_core import hookimpl


class RolloutKiller:
    def __init__(self, at_games: tuple[int, ...], replica: int = 0, namespace: str = "unstable", signal: int | None = None) -> None:
        self.at_games = set(at_games)
        self.replica = replica
        self.namespace = namespace
        self.signal = signal
        self.games = 0
        self.killed = 0
        self.killed_pids: list[int] = []
        self.titles: list[str] = []

    @hookimpl
    def unstable_game_end(self, ctx: Any) -> None:
        self.games += 1
        if self.games in self.at_games:
            actor = rollout_actor(ctx.run_dir, self.replica, self.namespace)
            if self.signal is None:
                ray.kill(actor, no_restart=True)
            else:
                pid = ray.get(actor.pid.remote())
                self.titles.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip())
                self.killed_pids.append(pid)
                os.kill(pid, self.signal)
            self.killed += 1


def rollout_actor(run_dir: str, replica: int = 0, namespace: str = "unstable") -> Any:
    """The live actor of one rollout replica of the run in ``run_dir`` (looked up by its name)."""
    prefix, role = actor_prefix(run_dir) + "/", f"rollout-{replica}"
    found = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        name = actor["name"]
        if actor["namespace"] == namespace and name.startswith(prefix):
            base, _, generation = name[len(prefix):].partition("#")
            if base == role:
                found.append((int(generation or 0), name))
    if not found:
        raise LookupError(f"no live actor of {role} for {run_dir}")
    return ray.get_actor(max(found)[1], namespace=namespace)


def actor_prefix(run_dir: str) -> str:
    from .executor import actor_prefix as prefix

    return prefix(run_dir)
