"""Run snapshots: ``RUN_DIR/state/step-N/`` at learner-step boundaries, and reading them back.

A snapshot is written into ``state/.tmp-step-N``, fsynced, renamed to ``state/step-N`` and only
then named by ``state/latest`` (written atomically, last, after ``config.json`` is fsynced too),
so a run killed at any moment leaves the previous snapshot as ``latest``. Older snapshots beyond
``keep`` are removed afterwards.
Torch tensors in the state go to ``tensors.safetensors``, everything else to ``state.json``.
"""

from __future__ import annotations

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
    is none or it cannot be read (malformed JSON or types, cut tensors)."""
    root = Path(run_dir) / "state"
    where = root / "latest"
    try:
        latest = json.loads(where.read_text())
        if not isinstance(latest, dict) or not isinstance(latest.get("path"), str) or not STEP_DIR.fullmatch(latest["path"]):
            raise ValueError(f"expected {{\"path\": \"step-N\"}}, found {str(latest)[:80]}")
        folder = root / latest["path"]
        where = folder / "state.json"
        data = json.loads(where.read_text())
        if not isinstance(data, dict) or type(data.get("step")) is not int or not isinstance(data.get("state"), dict):
            raise ValueError("expected an integer step and a state table")
        tensors: dict[str, Any] = {}
        if (folder / "tensors.safetensors").exists():
            from safetensors.torch import load_file

            where = folder / "tensors.safetensors"
            tensors = load_file(str(where))
        return data["step"], join_tensors(data["state"], tensors)
    except FileNotFoundError:
        if where == root / "latest":
            raise UnstableError(f"run directory {run_dir} holds no snapshot to resume from (no state/latest)") from None
        raise UnstableError(f"run directory {run_dir}: {where} is missing") from None
    except UnstableError:
        raise
    except Exception as exc:  # JSON, types, safetensors' own errors
        raise UnstableError(f"run directory {run_dir}: {where} is unreadable: {describe_error(exc)}") from None
