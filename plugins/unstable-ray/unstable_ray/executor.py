"""executor `ray`: every role of a run as an async Ray actor, reserved up front in one placement
group; the driver stays in the process that started the run.

    league, buffer, learner    one actor each (the learner only when the run trains)
    rollout-0 .. rollout-N-1   ``rollout_replicas`` actors, each with its own inference backends

Roles are built in their actors from the run's ``RunPlan`` with the driver's plugins (the plugin
system's ``PluginRecipe``), in parallel. Ray is connected to (or a local cluster started) when
the executor is made, in the driver's thread: Ray's local processes die with the thread that
started them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import socket
import threading
from typing import Any, cast

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from unstable_core import Checkpoint, RunFailed
from unstable_core.executors import BufferHandle, LeagueHandle, RoleHandles, RolloutHandle, build_role
from unstable_core.progress import verbose

from .actors import ACTOR_CLASSES, RoleHandle, RolloutActorHandle, checkpoint_files, death, original
from .environment import prepare_local_cluster, quiet_ray
from .options import RayOptions, Resources


def connect(options: RayOptions) -> bool:
    """Connect to the cluster the options name, or use the Ray already initialised here, or
    start a local one; return whether this call started Ray (and so must stop it)."""
    if not verbose():
        quiet_ray()  # whoever started Ray: the executor reports deaths itself
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster needs no token
    kwargs: dict[str, Any] = {"include_dashboard": False, "namespace": options.namespace, "log_to_driver": True,
                              "logging_level": logging.INFO if verbose() else logging.WARNING}
    if options.address is None:
        kwargs["num_cpus"] = options.num_cpus
        prepare_local_cluster()
    reachable(options.address)
    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        ray.init(address=options.address, **kwargs)
    except Exception as exc:
        raise RunFailed(f"ray executor: cannot connect to Ray at {options.address or 'a new local cluster'}: {exc}") from None
    finally:
        if main and sigterm is not None:  # ray.init replaces it with sys.exit; the run's own handler stays
            signal.signal(signal.SIGTERM, sigterm)
    return True


def actor_prefix(run_dir: str) -> str:
    """How the actors of the run in ``run_dir`` are named: ``PREFIX/league``, ``PREFIX/rollout-0``..."""
    path = os.path.abspath(run_dir)
    return f"{os.path.basename(path) or 'run'}-{hashlib.sha1(path.encode()).hexdigest()[:8]}"


def reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """Fail at once when a ``host:port`` address does not answer: ray.init would retry for
    minutes. ``auto`` and a missing address are Ray's to resolve."""
    if not address or address == "auto" or address == "local":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RunFailed(f"ray executor: address {address!r} is not auto, host:port or ray://host:port")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RunFailed(f"ray executor: no Ray cluster answers at {address} ({exc}); start one with "
                        "`ray start --head` or leave executor.address unset for a local one") from None


class RayExecutor:
    def __init__(self, options: RayOptions, plugins: Any) -> None:
        self.options = options
        self.plugins = plugins
        self.restarts = 0  # rollout actors restarted over the run
        self.plan: Any = None
        self.group: Any = None
        self.bundle_of: dict[str, int] = {}
        self.actors: dict[str, Any] = {}
        self.pids: dict[str, int] = {}  # role -> its actor's process id
        self._sent: tuple[str, Any] | None = None  # (checkpoint uid, object ref of its bytes)
        self.published: list[Checkpoint] = []  # every checkpoint published to the replicas, in order
        self._lock = threading.Lock()
        self._closed = False
        if getattr(plugins, "recipe", None) is None:
            raise RunFailed("ray executor: this plugin system was not made by load_plugins, so the actors cannot load "
                            "the same plugins (build it with unstable_core.load_plugins(extra=...))")
        self.started_ray = connect(options)
        self.prefix = ""

    # -- placement ------------------------------------------------------------------------------
    def roles(self, plan: Any) -> list[tuple[str, Resources]]:
        """The roles that run as actors, with what each reserves."""
        o = self.options
        out = [(r, getattr(o, r)) for r in ("league", "buffer") if r not in o.in_driver]
        out += [("learner", o.learner)] if plan.trains else []
        return out + [(f"rollout-{i}", o.rollout) for i in range(o.rollout_replicas)]

    def reserve(self, roles: list[tuple[str, Resources]]) -> None:
        """One placement group for every role that reserves anything, waited on with a timeout."""
        bundles: list[dict[str, float]] = []
        for name, res in roles:
            bundle = {k: v for k, v in (("CPU", res.num_cpus), ("GPU", res.num_gpus)) if v > 0}
            if bundle:
                self.bundle_of[name] = len(bundles)
                bundles.append(bundle)
        if not bundles:
            return
        self.group = placement_group(bundles, strategy=self.options.placement_strategy)
        try:
            ray.get(self.group.ready(), timeout=self.options.placement_timeout_s)
        except GetTimeoutError:
            remove_placement_group(self.group)
            self.group = None
            need = {k: sum(b.get(k, 0) for b in bundles) for k in ("CPU", "GPU")}
            have = {k: ray.cluster_resources().get(k, 0) for k in ("CPU", "GPU")}
            asked = ", ".join(f"{name} {bundles[i]}" for name, i in self.bundle_of.items())
            raise RunFailed(
                f"ray executor: the cluster cannot hold the run's roles within placement_timeout_s="
                f"{self.options.placement_timeout_s:g}: they need CPU {need['CPU']:g}, GPU {need['GPU']:g} ({asked}; "
                f"strategy {self.options.placement_strategy}); the cluster has CPU {have['CPU']:g}, GPU {have['GPU']:g}. "
                "Lower executor.rollout_replicas or the roles' num_cpus / num_gpus, or add nodes."
            ) from None

    def spawn(self, name: str, resources: Resources, generation: int = 0) -> Any:
        """Create the actor of one role (not built yet), named ``PREFIX/ROLE`` (``#N`` for the
        N-th restart: a killed actor's name is released asynchronously)."""
        label = f"{self.prefix}/{name}" + (f"#{generation}" if generation else "")
        kwargs: dict[str, Any] = {"num_cpus": resources.num_cpus, "num_gpus": resources.num_gpus,
                                  "name": label, "namespace": self.options.namespace}
        if name in self.bundle_of:
            kwargs["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=self.group, placement_group_bundle_index=self.bundle_of[name])
        actor = ACTOR_CLASSES[name.split("-")[0]].options(**kwargs).remote()
        self.actors[name] = actor
        return actor

    def build(self, names: list[str]) -> None:
        """Build these roles in their actors, in parallel; the first error fails the run."""
        refs = [self.actors[n].build.remote(n.split("-")[0], self.plan, self.plugins.recipe) for n in names]
        for name, ref in zip(names, refs):
            try:
                self.pids[name] = ray.get(ref)
            except RayTaskError as exc:
                raise original(exc) from None
            except RayActorError as exc:
                raise RunFailed(f"ray executor: the {name} actor died while its role was built ({death(exc)})") from None

    # -- the Executor protocol ------------------------------------------------------------------
    def start(self, plan: Any) -> RoleHandles:
        self.plan = plan
        self.prefix = actor_prefix(plan.run_dir)
        roles = self.roles(plan)
        self.reserve(roles)
        with self._lock:
            if self._closed:
                raise RunFailed("ray executor: shut down while starting")
            for name, resources in roles:
                self.spawn(name, resources)
        self.build([name for name, _ in roles])
        rollouts = [RolloutActorHandle(i, self.actors[f"rollout-{i}"], self) for i in range(self.options.rollout_replicas)]
        learner = RoleHandle("learner", self.actors["learner"]) if plan.trains else None
        league, buffer = (build_role(r, plan, self.plugins) if r in self.options.in_driver else RoleHandle(r, self.actors[r])
                          for r in ("league", "buffer"))
        # the actor handles forward each method to their actor: the protocols hold, unseen by a type checker
        return RoleHandles(league=cast(LeagueHandle, league), rollouts=cast(list[RolloutHandle], rollouts),
                           buffer=cast(BufferHandle, buffer), learner=learner)

    def start_rollout(self, index: int) -> Any:
        """A new actor for rollout replica ``index`` (its old one died), built; blocking."""
        name = f"rollout-{index}"
        old = self.actors.get(name)
        if old is not None:
            ray.kill(old, no_restart=True)
        self.spawn(name, self.options.rollout, generation=self.restarts)
        self.build([name])
        return self.actors[name]

    def checkpoint_bytes(self, checkpoint: Checkpoint) -> Any:
        """An object ref of the checkpoint's files, read by the learner's actor on its node (the
        driver's node may not see them) once for every replica of a publication."""
        if self._sent is None or self._sent[0] != checkpoint.uid:
            learner = self.actors.get("learner")
            ref = learner.pack.remote(checkpoint.path) if learner is not None else ray.put(checkpoint_files(checkpoint.path))
            self._sent = (checkpoint.uid, ref)
        return self._sent[1]

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        closing = [a.close.remote() for n, a in self.actors.items() if n.startswith("rollout")]
        try:
            ray.get(closing, timeout=10)
        except Exception:  # a dead or stuck actor: it is killed below
            pass
        for actor in self.actors.values():
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        self.actors = {}
        if self.group is not None:
            remove_placement_group(self.group)
            self.group = None
        if self.started_ray:
            ray.shutdown()
