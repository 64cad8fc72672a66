"""A data-parallel learner: ``data_parallel = N`` runs the learner in N processes, each on a shard
of every batch, with gradients summed across them before the one optimizer step they all take.

The learner the run builds is rank 0; it starts N-1 worker processes (``spawn``) that build the
same learner class with the same options, model and seed, so every rank starts from the same
weights. An update: rank 0 cuts the batch into N shards along whole games (grouped games stay
together, so a learner's ``prepare`` sees whole episodes), sends each worker its shard, and every
rank accumulates its shard's loss over ``batch_size`` = the whole batch's size, then the
gradients are summed (``all_reduce``): each rank holds the whole batch's gradient, clips it and
steps exactly as one learner on the whole batch would (up to the order of float additions).
Checkpoints are written by rank 0 alone; its state is the state of every rank, and loading a
state sends it to every worker. Processes talk through ``torch.distributed`` (``gloo`` on the CPU,
``nccl`` on CUDA, where rank r takes ``cuda:r``) and a pipe each for the shards and metrics.
"""

from __future__ import annotations

import contextlib
import datetime
import multiprocessing
import pickle
import socket
import time
import weakref
from typing import Any

import torch

from unstable_core import Step, UnstableError

#: the rank of the learner being built in this process, set by a worker before it builds its copy
_WORKER_RANK: int | None = None


def worker_rank() -> int | None:
    """The data-parallel rank of the learner being built here: None in the run's own process."""
    return _WORKER_RANK


def shard(steps: list[Step], n: int) -> list[list[Step]]:
    """``steps`` in ``n`` shards of whole games (a group counts as one game), balanced by tokens
    (largest game first to the lightest shard); each shard keeps the batch's order."""
    games: dict[tuple[int, str], list[int]] = {}
    for i, s in enumerate(steps):
        key = s.group_id if s.group_id is not None else s.game_idx
        games.setdefault((key, s.env_id), []).append(i)
    weights = sorted(games.values(), key=lambda idx: -sum(len(steps[i].turn.prompt_token_ids) + len(steps[i].turn.completion_token_ids)
                                                          for i in idx))
    loads, members = [0] * n, [[] for _ in range(n)]  # type: list[int], list[list[int]]
    for idx in weights:
        k = loads.index(min(loads))
        members[k] += idx
        loads[k] += sum(len(steps[i].turn.prompt_token_ids) + len(steps[i].turn.completion_token_ids) for i in idx)
    return [[steps[i] for i in sorted(m)] for m in members]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_device(device: str, rank: int) -> str:
    """Rank r's device: ``cuda:r`` where the learner's is CUDA, else the learner's."""
    return f"cuda:{rank}" if device.startswith("cuda") else device


def _send(conn: Any, message: Any) -> None:
    # plain pickle: multiprocessing's own pickler moves tensors to shared memory, so a state sent
    # to a worker would share its optimizer tensors with rank 0's, and both would step them
    conn.send_bytes(pickle.dumps(message))


def on_cpu(value: Any) -> Any:
    """``value`` with every tensor in it copied to the CPU (a state for another rank's device)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_cpu(v) for v in value)
    return value


def _recv(conn: Any) -> Any:
    return pickle.loads(conn.recv_bytes())


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def _init_group(backend: str, port: int, rank: int, world: int, timeout_s: float) -> None:
    import torch.distributed as dist

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def _worker(cls: type, options: Any, model: str, seed: int, rank: int, world: int, port: int, conn: Any) -> None:
    """A worker process: build the learner, then serve shards until told to stop or the pipe closes."""
    global _WORKER_RANK
    _WORKER_RANK = rank
    _send(conn, ("started", None))  # the arguments unpickled: the learner class imports here
    try:
        _init_group(backend_for(options.device), port, rank, world, options.data_parallel_timeout_s)
        learner = cls(options.model_copy(update={"device": rank_device(options.device, rank)}), model, seed=seed)
        _send(conn, ("ready", None))
    except BaseException as exc:  # noqa: BLE001 - told to rank 0, which raises it
        _send(conn, ("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        try:
            what, payload = _recv(conn)
        except (EOFError, OSError):  # the run's process is gone
            return
        try:
            if what == "update":
                _send(conn, ("ok", learner.update_shard(*payload)))
            elif what == "load_state":
                learner.load_state_dict(payload)
                _send(conn, ("ok", None))
            else:
                _send(conn, ("ok", None))
                return
        except BaseException as exc:  # noqa: BLE001
            _send(conn, ("error", f"{type(exc).__name__}: {exc}"))
            return


class Workers:
    """Ranks 1..N-1 of a data-parallel learner, seen from rank 0."""

    def __init__(self, learner: Any, model: str, seed: int) -> None:
        options = learner.options
        self.world = options.data_parallel
        if options.device.startswith("cuda") and torch.cuda.device_count() < self.world:
            raise UnstableError(f"learner.data_parallel = {self.world} takes a GPU per rank; this machine has "
                                f"{torch.cuda.device_count()}")
        port = free_port()
        ctx = multiprocessing.get_context("spawn")
        self.conns, self.procs = [], []
        for rank in range(1, self.world):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(type(learner), options, model, seed, rank, self.world, port, child),
                               daemon=True, name=f"unstable-learner-rank-{rank}")
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        weakref.finalize(self, _stop, list(self.conns), list(self.procs))
        try:  # every worker alive before the rendezvous, which would wait for a dead one until the timeout
            self.replies("starting")
            _init_group(backend_for(options.device), port, 0, self.world, options.data_parallel_timeout_s)
            self.replies("building its learner")
        except BaseException:
            self.close()
            raise
        global _WATCHED
        _WATCHED = weakref.ref(self)

    def check_alive(self, what: str, grace_s: float = 0.0) -> None:
        """Raise an UnstableError naming the first worker that is no longer running (waiting up
        to ``grace_s`` for one that is exiting)."""
        for rank, proc in enumerate(self.procs, start=1):
            if grace_s:
                proc.join(timeout=grace_s)
            if not proc.is_alive():
                raise UnstableError(f"data-parallel learner rank {rank} died while {what} (exit status {proc.exitcode}; "
                                    "its output says why)")

    def replies(self, what: str) -> list[Any]:
        out = []
        for rank, conn in enumerate(self.conns, start=1):
            try:
                status, payload = _recv(conn)
            except (EOFError, OSError):
                self.procs[rank - 1].join(timeout=5)
                raise UnstableError(f"data-parallel learner rank {rank} died while {what} (exit status "
                                    f"{self.procs[rank - 1].exitcode}; its output says why)") from None
            if status == "error":
                raise UnstableError(f"data-parallel learner rank {rank} failed while {what}: {payload}")
            out.append(payload)
        return out

    def send(self, messages: list[tuple[str, Any]]) -> None:
        for conn, message in zip(self.conns, messages):
            _send(conn, message)

    def close(self) -> None:
        global _WATCHED
        if _WATCHED is not None and _WATCHED() is self:
            _WATCHED = None
        _stop(self.conns, self.procs)
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _stop(conns: list[Any], procs: list[Any]) -> None:
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            _send(conn, ("stop", None))
    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Every rank's gradients summed into every rank's (a missing gradient counts as zeros)."""
    import torch.distributed as dist

    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    wait_all([dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, async_op=True) for p in params])


def sum_numbers(values: list[float], device: Any) -> list[float]:
    """Numbers summed over the ranks (float64)."""
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    wait_all([dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)])
    return t.tolist()


def wait_all(works: list[Any]) -> None:
    """Wait for collectives. On rank 0 the worker processes are watched meanwhile: a rank that
    dies (killed, out of memory) ends the wait within ``WATCH_POLL_S`` with an UnstableError
    naming it, where the collective would wait for it until ``data_parallel_timeout_s`` (NCCL)
    or fail with a transport error that names no rank (gloo)."""
    watched = _WATCHED() if _WATCHED is not None else None
    if watched is None:
        for work in works:
            work.wait()
        return
    pause = 0.0005
    try:
        while not all(work.is_completed() for work in works):
            watched.check_alive("updating")
            time.sleep(pause)
            pause = min(pause * 2, WATCH_POLL_S)
        for work in works:
            work.wait()  # raises a failed collective's error
    except RuntimeError:
        watched.check_alive("updating", grace_s=WATCH_POLL_S)
        raise


#: how often rank 0 looks at its workers while it waits for a collective, at most (seconds)
WATCH_POLL_S = 0.01
#: the Workers of the data-parallel learner in this process (rank 0), watched during collectives
_WATCHED: weakref.ReferenceType[Workers] | None = None
