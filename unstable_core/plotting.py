"""`unstable plot RUN_DIR [RUN_DIR ...]`: evaluation and training curves from metrics.jsonl
(matplotlib). Several runs (seeds of one config) are drawn as their mean with a band from the
lowest to the highest run, at the steps every run reached."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import UnstableError


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise UnstableError(f"{run_dir}: no metrics.jsonl (is this a run directory?)")
    records = []
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError:  # JSONDecodeError, or bytes that are no UTF-8
                raise UnstableError(f"{path}:{n}: not valid JSON") from None
            if not isinstance(record, dict):
                raise UnstableError(f"{path}:{n}: not a record (a JSON object)")
            records.append(checked(record, f"{path}:{n}"))
    return records


class _Curve(BaseModel):
    """The fields of a record the curves read, typed (the rest as it is)."""

    model_config = ConfigDict(extra="allow")

    step: int


class _EvalPoint(_Curve):
    env_id: str
    opponent: str
    model: str = ""
    win_rate: float
    invalid_rate: float
    policy: dict[str, float] = {}


class _TrainPoint(_Curve):
    loss: float | None = None
    grad_norm: float | None = None


def checked(record: dict[str, Any], where: str) -> dict[str, Any]:
    """An ``eval`` or ``train`` record with the fields the curves read, of their types; one
    line naming the line when it has not. Other records pass as they are."""
    models: dict[Any, type[_Curve]] = {"eval": _EvalPoint, "train": _TrainPoint}
    model = models.get(record.get("type"))
    if model is None:
        return record
    try:
        return model.model_validate(record).model_dump(mode="json", exclude_none=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "record"
        raise UnstableError(f"{where}: a malformed {record['type']} record ({field}: {first['msg'].lower()})") from None


@dataclass
class Spread:
    """One curve over several runs: at each step every run has, the mean, lowest and highest."""

    steps: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    runs: int


def spread(runs: list[dict[int, float]]) -> Spread:
    """Mean and range of several runs' values ({step: value} each), at the steps all runs have."""
    steps = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    columns = [[r[s] for r in runs] for s in steps]
    return Spread(steps, [statistics.fmean(c) for c in columns], [min(c) for c in columns], [max(c) for c in columns],
                  len(runs))


def curves(runs: list[list[dict]]) -> dict[str, dict[str, Spread]]:
    """{panel: {label: Spread}} for the panels "win rate", "invalid-move rate", "exploitability"
    (evaluations with policy metrics) and, when the runs trained, "loss" and "grad norm". A training run's evaluations are labelled (env, opponent)
    across checkpoints; a tournament's (env, model, opponent)."""
    per_run: dict[str, dict[str, list[dict[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for records in runs:
        training = any(r.get("type") == "train" for r in records)
        mine: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        for r in records:
            if r.get("type") == "eval":
                label = f"{r['env_id']} vs {r['opponent']}" if training else f"{r['env_id']}: {r.get('model', '')} vs {r['opponent']}"
                mine["win rate"][label][r["step"]] = r["win_rate"]
                mine["invalid-move rate"][label][r["step"]] = r["invalid_rate"]
                if "exploitability" in (r.get("policy") or {}):  # one figure per env, whatever the opponent
                    mine["exploitability"][r["env_id"]][r["step"]] = r["policy"]["exploitability"]
            elif r.get("type") == "train":
                for key, panel in (("loss", "loss"), ("grad_norm", "grad norm (before clip)")):
                    if key in r:
                        mine[panel][panel][r["step"]] = r[key]
        for panel, labels in mine.items():
            for label, values in labels.items():
                per_run[panel][label].append(values)
    return {panel: {label: spread(values) for label, values in sorted(labels.items())} for panel, labels in per_run.items()}


PANELS = ("win rate", "exploitability", "invalid-move rate", "loss", "grad norm (before clip)")


def plot_runs(run_dirs: list[str | Path], out: str | Path | None = None, ceiling: float | None = None,
              references: dict[str, float] | None = None) -> Path:
    """Draw the runs' curves into a PNG: ``out``, or RUN_DIR/curve.png for one run and curve.png
    in the working directory for several. ``ceiling`` draws the best known win rate as a line;
    ``references`` ({label: exploitability}, e.g. the uniform policy's and CFR's) draw lines on
    the exploitability panel (log scale)."""
    try:
        import matplotlib
    except ImportError:
        raise UnstableError("plotting needs matplotlib: pip install 'unstable-core[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = curves([read_metrics(d) for d in run_dirs])
    if not drawn:
        raise UnstableError(f"{', '.join(map(str, run_dirs))}: metrics.jsonl has no eval or train records to plot")
    panels = [p for p in PANELS if p in drawn]
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for label, s in drawn[panel].items():
            shown = label if s.runs == 1 else f"{label} (mean of {s.runs})"
            (line,) = ax.plot(s.steps, s.mean, marker="o" if len(s.steps) < 30 else None, label=shown)
            if s.runs > 1:
                ax.fill_between(s.steps, s.low, s.high, color=line.get_color(), alpha=0.2, linewidth=0)
        if panel == "win rate" and ceiling is not None:
            ax.axhline(ceiling, color="grey", linestyle="--", label=f"ceiling {ceiling:g}")
        if panel == "exploitability":
            for name, value in (references or {}).items():
                ax.axhline(value, linestyle=":", color="grey", label=f"{name} {value:.4g}")
            ax.set_yscale("log")
        ax.set(title=panel, xlabel="learner step")
        if panel == "win rate":
            ax.set_ylim(0, 1)
        elif panel == "invalid-move rate":  # a few percent, drawn large enough to read
            ax.set_ylim(0, max([0.05] + [1.2 * h for s in drawn[panel].values() for h in s.high]))
        ax.legend(fontsize=7)
    names = [Path(d).name for d in run_dirs]
    title = names[0] if len(names) == 1 else f"{len(names)} runs ({', '.join(names)}); bands: lowest to highest run"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(out) if out else (Path(run_dirs[0]) / "curve.png" if len(run_dirs) == 1 else Path("curve.png"))
    save_figure(fig, path)
    return path


def save_figure(fig: Any, path: str | Path) -> None:
    """Write a matplotlib figure to ``path`` (its format from the extension) and close it; an
    unknown extension or a path that cannot be written is one UnstableError naming it."""
    import matplotlib.pyplot as plt

    try:
        suffix = Path(path).suffix.lstrip(".").lower()
        formats = fig.canvas.get_supported_filetypes()
        if suffix not in formats:
            raise UnstableError(f"{path}: cannot draw a .{suffix or '(no extension)'} file; use one of: {', '.join(sorted(formats))}")
        try:
            fig.savefig(path, dpi=100)
        except OSError as exc:
            raise UnstableError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
