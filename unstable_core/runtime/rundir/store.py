"""Run snapshots: ``RUN_DIR/state/step-N/`` at learner-step boundaries, and reading them back.

A snapshot is written into ``state/.tmp-step-N``, fsynced, renamed to ``state/step-N`` and only
then named by ``state/latest`` (written atomically, last, after ``config.json`` is fsynced too),
so a run killed at any moment leaves the previous snapshot as ``latest``. Older snapshots beyond
``keep`` are removed afterwards.
Torch tensors in the state go to ``tensors.safetensors``, everything else to ``state.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

from ...errors import UnstableError, describe_error
from .jsonio import fsync_path, write_json_atomic

TENSOR = "__tensor__"
STEP_DIR = re.compile(r"step-\d+")
#: for tests: SIGKILL this process in the middle of writing the snapshot of this step
KILL_IN_SNAPSHOT_ENV = "UNSTABLE_TEST_KILL_IN_SNAPSHOT"


def _is_tensor(value: Any) -> bool:
    t = type(value)
    return t.__name__ in ("Tensor", "Parameter") and t.__module__.startswith("torch")


def split_tensors(value: Any, tensors: dict[str, Any], path: str = "") -> Any:
    """``value`` with every tensor replaced by ``{"__tensor__": key}``, the tensors put in ``tensors``."""
    if _is_tensor(value):
        key = path or "root"
        tensors[key] = value.detach().cpu().contiguous()
        return {TENSOR: key}
    if isinstance(value, dict):
        return {str(k): split_tensors(v, tensors, f"{path}/{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [split_tensors(v, tensors, f"{path}/{i}") for i, v in enumerate(value)]
    return value


def join_tensors(value: Any, tensors: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if set(value) == {TENSOR}:
            return tensors[value[TENSOR]]
        return {k: join_tensors(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [join_tensors(v, tensors) for v in value]
    return value


def write_snapshot(run_dir: str | Path, step: int, state: dict[str, Any], keep: int = 2) -> Path:
    root = Path(run_dir) / "state"
    root.mkdir(exist_ok=True)
    final, tmp = root / f"step-{step}", root / f".tmp-step-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    tensors: dict[str, Any] = {}
    plain = split_tensors(state, tensors)
    if tensors:
        from safetensors.torch import save_file  # only runs whose state holds tensors need it

        save_file(tensors, str(tmp / "tensors.safetensors"))
    with open(tmp / "state.json", "w", encoding="utf-8") as fh:
        json.dump({"step": step, "state": plain}, fh)
        fh.flush()
        if os.environ.get(KILL_IN_SNAPSHOT_ENV) == str(step):
            os.kill(os.getpid(), signal.SIGKILL)
        os.fsync(fh.fileno())
    fsync_path(tmp)
    if final.exists():  # a snapshot of this step from before a kill: replaced
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_path(root)
    fsync_path(Path(run_dir) / "config.json")  # what a resume reads with the snapshot (written without fsync)
    write_json_atomic(root / "latest", {"step": step, "path": final.name})
    for old in sorted(_steps(root))[:-keep] if keep > 0 else []:
        shutil.rmtree(root / f"step-{old}", ignore_errors=True)
    return final


def _steps(root: Path) -> list[int]:
    out = []
    for p in root.glob("step-*"):
        try:
            out.append(int(p.name.split("-", 1)[1]))
        except ValueError:
            pass
    return out


def read_latest(run_dir: str | Path) -> tuple[int, dict[str, Any]]:
    """(step, state) of the snapshot ``state/latest`` names; one line naming the file when there
    is none or it cannot be read (malformed JSON or types, cut tensors, a step other than the
    folder's)."""
    step, state, _ = read_snapshot(run_dir)
    return step, state


def snapshot_steps(run_dir: str | Path) -> list[int]:
    """The steps of the snapshot folders ``state/step-N`` (oldest first), whatever ``latest`` says."""
    root = Path(run_dir) / "state"
    return sorted(_steps(root)) if root.is_dir() else []


def read_snapshot(run_dir: str | Path, repair: bool = False) -> tuple[int, dict[str, Any], list[str]]:
    """(step, state, repaired) of the snapshot ``state/latest`` names. With ``repair``, a
    ``latest`` that is missing, unreadable or names a snapshot that cannot be read gives way to
    the newest snapshot folder that can, and ``repaired`` says so; without, one line naming the
    file."""
    root = Path(run_dir) / "state"
    try:
        step, state = _read_named(run_dir, root)
        return step, state, []
    except UnstableError as exc:
        steps = snapshot_steps(run_dir)
        if not repair or not steps:
            if steps and not (root / "latest").exists():
                raise UnstableError(f"run directory {run_dir}: state/latest is missing, but state/ holds snapshots "
                                    f"({', '.join(f'step-{s}' for s in steps)}); go on from the newest that reads (--repair)") from None
            raise
        problem = str(exc).removeprefix(f"run directory {run_dir}: ")
    for step in reversed(steps):
        try:
            found, state = _read_folder(run_dir, root / f"step-{step}", step)
        except UnstableError:
            continue
        return found, state, [f"{problem}: went on from state/step-{step}, the newest snapshot that reads"]
    raise UnstableError(f"run directory {run_dir}: {problem}; no snapshot in state/ reads (--repair cannot go on)")


def _read_named(run_dir: str | Path, root: Path) -> tuple[int, dict[str, Any]]:
    where = root / "latest"
    try:
        latest = json.loads(where.read_text())
        if not isinstance(latest, dict) or not isinstance(latest.get("path"), str) or not STEP_DIR.fullmatch(latest["path"]):
            raise ValueError(f"expected {{\"step\": N, \"path\": \"step-N\"}}, found {str(latest)[:80]}")
        step = latest.get("step")
        if type(step) is not int or step < 0 or latest["path"] != f"step-{step}":
            raise ValueError(f"it names step {repr(step)[:20]} and folder {latest['path']!r}: expected a step N >= 0 and step-N")
    except FileNotFoundError:
        raise UnstableError(f"run directory {run_dir} holds no snapshot to resume from (no state/latest)") from None
    except Exception as exc:  # JSON, types
        raise UnstableError(f"run directory {run_dir}: {where} is unreadable: {describe_error(exc)}") from None
    return _read_folder(run_dir, root / latest["path"], step)


def _read_folder(run_dir: str | Path, folder: Path, step: int) -> tuple[int, dict[str, Any]]:
    where = folder / "state.json"
    try:
        data = json.loads(where.read_text())
        if not isinstance(data, dict) or type(data.get("step")) is not int or not isinstance(data.get("state"), dict):
            raise ValueError("expected an integer step and a state table")
        if data["step"] != step:
            raise ValueError(f"it holds step {data['step']}, its folder {folder.name}")
        tensors: dict[str, Any] = {}
        if (folder / "tensors.safetensors").exists():
            from safetensors.torch import load_file

            where = folder / "tensors.safetensors"
            tensors = load_file(str(where))
        return data["step"], join_tensors(data["state"], tensors)
    except FileNotFoundError:
        raise UnstableError(f"run directory {run_dir}: {where} is missing") from None
    except Exception as exc:  # JSON, types, safetensors' own errors
        raise UnstableError(f"run directory {run_dir}: {where} is unreadable: {describe_error(exc)}") from None


def checkpoint_files(path: str | Path) -> dict[str, list[Any]]:
    """``{name: [size, SHA-256]}`` of a checkpoint's files (a folder's, recursively; names
    relative to it), recorded in a snapshot once per checkpoint and checked on resume."""
    where = Path(path)
    files = [where] if where.is_file() else sorted(p for p in where.rglob("*") if p.is_file() and not p.is_symlink())
    out: dict[str, list[Any]] = {}
    for p in files:
        digest = hashlib.sha256()
        with open(p, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        out["." if p == where else p.relative_to(where).as_posix()] = [p.stat().st_size, digest.hexdigest()]
    return out


def verify_checkpoints(run_dir: str | Path, step: int, state: dict[str, Any]) -> None:
    """Every checkpoint whose files the snapshot recorded is there, its files with the sizes and
    SHA-256 written; one line naming the first that is not."""
    driver = state.get("driver")
    if not isinstance(driver, dict) or not isinstance(driver.get("checkpoints"), list):
        return  # a malformed snapshot: restoring it names it
    recorded = driver.get("checkpoint_files")
    if not isinstance(recorded, dict):
        recorded = {}

    def shown(p: Path) -> str:
        try:
            return p.relative_to(Path(run_dir)).as_posix()
        except ValueError:
            return str(p)

    for ckpt in driver["checkpoints"]:
        if not isinstance(ckpt, dict) or not isinstance(ckpt.get("path"), str) or not ckpt["path"]:
            continue
        where, files = Path(ckpt["path"]), recorded.get(str(ckpt.get("uid")))
        if not isinstance(files, dict):
            continue  # not local when the snapshot was taken, or a snapshot that recorded no files
        if not where.exists():
            raise UnstableError(f"run directory {run_dir}: {shown(where)} is missing (the snapshot of step {step} names "
                                f"checkpoint {ckpt.get('uid')!r}); put it back")
        found = checkpoint_files(where)
        for name, expected in files.items():
            path = where if name == "." else where / str(name)
            if name not in found:
                raise UnstableError(f"run directory {run_dir}: {shown(path)} is missing (checkpoint {ckpt.get('uid')!r} "
                                    f"of the snapshot of step {step}); put it back")
            if found[name] != expected:
                raise UnstableError(f"run directory {run_dir}: {shown(path)}: its size or SHA-256 differs from what the "
                                    f"snapshot of step {step} recorded; the checkpoint was edited or replaced: put it back")


def latest_step(run_dir: str | Path) -> int | None:
    """The step ``state/latest`` names (None: no snapshot, or a ``latest`` that does not read)."""
    try:
        step = json.loads((Path(run_dir) / "state" / "latest").read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if type(step) is int and step >= 0 else None
