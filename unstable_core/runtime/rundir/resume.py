"""What ``--resume`` checks before it trusts a run directory, and starting over a run stopped
before its first snapshot.

Each file a resume reads is checked before any role is built: ``config.json``'s components
against what the config builds, ``state/latest`` and the snapshot it names (``store.py``), the
checkpoints the snapshot recorded (sizes and SHA-256), and ``registry.json``. What is wrong is one
line naming the file; with ``repair`` what can be repaired is, and said so (the ``resume``
record's ``repaired``). A training run with no snapshot at all that never got past its first
``save_every`` updates is started over from its ``config.json``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UnstableError, describe_error
from ..plan import RunPlan
from .jsonio import indented_json
from .store import read_snapshot, snapshot_steps, verify_checkpoints

#: what a run writes besides config.json; a start over removes them
RUN_OUTPUTS = ("metrics.jsonl", "plugins.json", "registry.json", "checkpoints", "state")


@dataclass
class ResumeCheck:
    snapshot: tuple[int, dict[str, Any]] | None = None
    repaired: list[str] = field(default_factory=list)
    started_over: bool = False


def check_resume(plan: RunPlan, repair: bool) -> ResumeCheck:
    """The snapshot to go on from, what ``repair`` repaired, or a start over; one line naming
    the file for what cannot be trusted."""
    run_dir = Path(plan.run_dir)
    out = ResumeCheck()
    out.repaired += _check_components(plan, repair)
    root = run_dir / "state"
    # a kill between its first snapshot's rename and ``latest`` leaves that one unnamed: never a snapshot
    unnamed = all(s <= plan.config.training.save_every for s in snapshot_steps(run_dir))
    if not (root / "latest").exists() and unnamed and _may_start_over(plan):
        _start_over(run_dir)
        out.started_over = True
        return out
    step, state, notes = read_snapshot(run_dir, repair=repair)
    out.repaired += notes
    verify_checkpoints(run_dir, step, state)
    out.repaired += _check_registry(run_dir, repair)
    out.snapshot = (step, state)
    return out


def _check_components(plan: RunPlan, repair: bool) -> list[str]:
    """``config.json``'s components are what the config builds (a plugin that changed its
    defaults builds others: the resumed run would not be the run)."""
    path = Path(plan.run_dir) / "config.json"
    expected = json.loads(indented_json({k: {"name": r.name, **r.options} for k, r in plan.recipes.items()}))
    try:
        saved = json.loads(path.read_text()).get("components")
    except (OSError, ValueError, AttributeError) as exc:  # read once already (the config): rare
        raise UnstableError(f"{path}: unreadable ({describe_error(exc)})") from None
    problem = None
    if not isinstance(saved, dict) or not all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in saved.values()):
        problem = f"its components are malformed (expected {{key: {{\"name\": ..., options}}}}, found {str(saved)[:80]})"
    elif json.dumps(saved, sort_keys=True) != json.dumps(expected, sort_keys=True):
        key = next((k for k in sorted(set(saved) | set(expected)) if saved.get(k) != expected.get(k)), "?")
        problem = (f"components.{key} is {json.dumps(saved.get(key))[:120]}, the config builds "
                   f"{json.dumps(expected.get(key))[:120]}")
    if problem is None:
        return []
    if not repair:
        raise UnstableError(f"{path}: {problem}; resume with what the config builds (--repair), or start a new run")
    return [f"config.json: {problem}: rewritten with what the config builds"]


def _check_registry(run_dir: Path, repair: bool) -> list[str]:
    """``registry.json`` (a view of the league the snapshot holds, rewritten at start) reads."""
    path = run_dir / "registry.json"
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("models"), list):
            raise ValueError(f"expected a table with a models list, found {str(data)[:80]}")
        return []
    except FileNotFoundError:
        problem = "is missing"
    except (OSError, ValueError) as exc:
        problem = f"is unreadable: {describe_error(exc)}"
    if not repair:
        raise UnstableError(f"run directory {run_dir}: registry.json {problem}; rewrite it from the snapshot (--repair)")
    return [f"registry.json {problem}: rewritten from the snapshot"]


def _may_start_over(plan: RunPlan) -> bool:
    """A training run that writes snapshots, stopped before its first: no update past the first
    ``save_every`` in its log or checkpoints, and not completed. Anything else without a snapshot
    (a tournament, ``keep_snapshots = 0``, a run whose ``state/`` was removed) is refused."""
    t = plan.config.training
    if not plan.trains or t.keep_snapshots == 0:
        return False
    run_dir = Path(plan.run_dir)
    first = t.save_every  # the saved config's: --set may only change learning_steps
    try:
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            if not isinstance(record, dict):
                continue
            if record.get("type") == "train" and isinstance(record.get("step"), int) and record["step"] > first:
                return False
            if record.get("type") == "resume" or (record.get("type") == "end" and record.get("status") == "completed"):
                return False
    except FileNotFoundError:
        pass
    except OSError:
        return False
    ckpts = run_dir / "checkpoints"
    steps = [p.name.removeprefix("ckpt-") for p in ckpts.iterdir()] if ckpts.is_dir() and not ckpts.is_symlink() else []
    return not any(s.isdigit() and int(s) > first for s in steps)


def _start_over(run_dir: Path) -> None:
    """Remove what the run wrote besides its config.json (links removed, never followed)."""
    try:
        for name in RUN_OUTPUTS:
            path = run_dir / name
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
        games = run_dir / "games"
        if games.is_dir() and not games.is_symlink():
            for p in games.iterdir():
                if p.is_symlink() or p.is_file():
                    p.unlink()
    except OSError as exc:
        raise UnstableError(f"run directory {run_dir}: cannot start it over: {describe_error(exc)}") from None
