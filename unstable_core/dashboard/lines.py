"""The dashboard as plain lines, for output that is not a terminal (a log file, CI, a pipe).

Each line is written whole (never wrapped by a console), so no number is split across lines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .state import DashboardState
from .view import failures_text, learner_text, progress_text, throughput_text


def progress_line(state: DashboardState) -> str:
    parts = [progress_text(state), throughput_text(state)]
    learner = learner_text(state)
    if learner:
        parts.append(learner)
    failures = failures_text(state)
    if failures:
        parts.append(failures)
    return f"[{state.name}] " + " | ".join(parts)


def eval_line(r: Mapping[str, Any]) -> str:
    policy = r.get("policy") or {}
    exploit = f", exploitability {policy['exploitability']:.4f}" if "exploitability" in policy else ""
    for name, figures in sorted((r.get("mixtures") or {}).items()):
        if "exploitability" in figures:
            exploit += f", {name} mixture {figures['exploitability']:.4f}"
    mean_return = f" return {r['mean_return']:+.2f}" if r.get("mean_return") is not None else ""
    return (f"eval step {r['step']} {r['env_id']} {r['model']} vs {r['opponent']}: win {r['win_rate']:.2f} "
            f"draw {r['draw_rate']:.2f} loss {r['loss_rate']:.2f} invalid {r['invalid_rate']:.2f}{mean_return} "
            f"({r['games']} games{exploit})")


def end_line(state: DashboardState) -> str:
    error = f": {state.error}" if state.error else ""
    restarts = f", {len(state.restarts)} restarted" if state.restarts else ""
    return (f"[{state.name}] {state.status}{error}: {state.games:,} games, {state.step} learner steps, {state.failed} failed"
            f"{restarts}")
