"""What `unstable plot` draws, read from runs' metrics.jsonl: typed records, each panel's curves
(per (env, opponent) across checkpoints; several runs as mean and range; runs in groups when
asked, e.g. by model sampler)."""

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
    games: int = 0
    win_rate: float
    invalid_rate: float
    policy: dict[str, float] = {}
    mixtures: dict[str, dict[str, float]] = {}


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
    """One curve over several runs: at each step every run has, the mean, lowest and highest;
    for one run's rates, ``error`` holds each point's binomial standard error."""

    steps: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    runs: int
    error: list[float] | None = None


def spread(runs: list[dict[int, float]], games: list[dict[int, int]] | None = None) -> Spread:
    """Mean and range of several runs' values ({step: value} each), at the steps all runs have;
    with one run and the ``games`` each rate was measured over, its standard errors."""
    steps = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    columns = [[r[s] for r in runs] for s in steps]
    out = Spread(steps, [statistics.fmean(c) for c in columns], [min(c) for c in columns], [max(c) for c in columns], len(runs))
    if len(runs) == 1 and games:
        out.error = [binomial_se(runs[0][s], games[0].get(s, 0)) for s in steps]
    return out


def binomial_se(rate: float, games: int) -> float:
    """The standard error of a rate measured over ``games`` games (0 when there were none)."""
    return (rate * (1 - rate) / games) ** 0.5 if games > 0 else 0.0


def curves(runs: list[list[dict]], groups: list[str] | None = None) -> dict[str, dict[str, Spread]]:
    """{panel: {label: Spread}} for the panels "win rate", "invalid-move rate", "exploitability"
    (evaluations with policy metrics: the evaluated model's, and the population's mixtures') and,
    when the runs trained, "loss" and "grad norm". A training run's evaluations are labelled (env,
    opponent) across checkpoints; a tournament's (env, model, opponent). With ``groups`` (one name
    a run), runs are averaged within their group only and the labels start with its name."""
    per_run: dict[str, dict[str, list[dict[int, float]]]] = defaultdict(lambda: defaultdict(list))
    per_run_games: dict[str, dict[str, list[dict[int, int]]]] = defaultdict(lambda: defaultdict(list))
    for n, records in enumerate(runs):
        prefix = f"{groups[n]}: " if groups else ""
        training = any(r.get("type") == "train" for r in records)
        mine: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        games: dict[str, dict[int, int]] = defaultdict(dict)
        for r in records:
            if r.get("type") == "eval":
                label = prefix + (f"{r['env_id']} vs {r['opponent']}" if training else f"{r['env_id']}: {r.get('model', '')} vs {r['opponent']}")
                mine["win rate"][label][r["step"]] = r["win_rate"]
                mine["invalid-move rate"][label][r["step"]] = r["invalid_rate"]
                games[label][r["step"]] = r.get("games", 0)
                if "exploitability" in (r.get("policy") or {}):  # one figure per env, whatever the opponent
                    mine["exploitability"][prefix + r["env_id"]][r["step"]] = r["policy"]["exploitability"]
                for name, figures in (r.get("mixtures") or {}).items():
                    if "exploitability" in figures:
                        mine["exploitability"][f"{prefix}{r['env_id']} {name} mixture"][r["step"]] = figures["exploitability"]
            elif r.get("type") == "train":
                for key, panel in (("loss", "loss"), ("grad_norm", "grad norm (before clip)")):
                    if key in r:
                        mine[panel][prefix + panel][r["step"]] = r[key]
        for panel, labels in mine.items():
            for label, values in labels.items():
                per_run[panel][label].append(values)
                if panel in RATE_PANELS:
                    per_run_games[panel][label].append(games[label])
    return {panel: {label: spread(values, per_run_games[panel].get(label)) for label, values in sorted(labels.items())}
            for panel, labels in per_run.items()}


def config_value(records: list[dict], key: str) -> str:
    """The value of a dotted config key (``model_sampler.name``) in a run's start record, as
    text; "-" when the run's config has no such key. Several keys, comma-separated
    (``model_sampler.name,model_sampler.payoff``), give their values joined by "/", those a run
    lacks left out."""
    start = next((r for r in records if r.get("type") == "start"), {})
    values = []
    for one in key.split(","):
        value: Any = start.get("config")
        for part in one.strip().split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            values.append(value if isinstance(value, str) else json.dumps(value))
    return "/".join(values) or "-"


RATE_PANELS = ("win rate", "invalid-move rate")
