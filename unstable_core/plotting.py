"""`unstable plot RUN_DIR [RUN_DIR ...]`: evaluation and training curves from metrics.jsonl
(matplotlib). One run's evaluations carry error bars (the binomial standard error of a rate over
its games); several runs (seeds of one config) are drawn as their mean with a band from the
lowest to the highest run, at the steps every run reached, and runs that differ in length or
status are named in a warning; ``--group-by KEY`` averages runs within each value of a config
key only (seeds x samplers). A tournament (evaluations at one step, no training) is drawn as
bars, one per (env, model, opponent)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .curves import Spread, binomial_se, config_value, curves, read_metrics, spread
from .errors import UnstableError

__all__ = ["Spread", "binomial_se", "config_value", "curves", "plot_runs", "read_metrics", "spread", "wrapped"]


def extent_warnings(runs: list[list[dict]], names: list[str]) -> list[str]:
    """One line when the runs differ in length (the last learner step each reached) or in how
    they ended: the curves show only the steps every run reached."""
    if len(runs) < 2:
        return []
    last = [max((r.get("step", 0) for r in records if r.get("type") in ("eval", "train")), default=0) for records in runs]
    status = [next((str(r.get("status")) for r in reversed(records) if r.get("type") == "end"), "running") for records in runs]
    lines = []
    if len(set(last)) > 1:
        lines.append(f"the runs differ in length ({', '.join(f'{n}: step {s}' for n, s in zip(names, last))}); "
                     f"the curves stop at step {min(last)}, the last every run reached")
    if len(set(status)) > 1:
        lines.append(f"the runs ended differently ({', '.join(f'{n}: {s}' for n, s in zip(names, status))})")
    return lines


PANELS = ("win rate", "exploitability", "invalid-move rate", "loss", "grad norm (before clip)")


def run_title(records: list[dict], fallback: str) -> str:
    """What a run is, from its start record: the config's name and the model it trained."""
    start = next((r for r in records if r.get("type") == "start"), {})
    config = start.get("config")  # read as written: a hand-edited log may hold anything here
    model = config.get("model") if isinstance(config, dict) else None
    model = model.get("model") if isinstance(model, dict) else None
    name = start.get("name") or fallback
    return f"{name} ({model})" if model else str(name)


def is_tournament(runs: list[list[dict]]) -> bool:
    """Evaluations at a single step and no training: a table of pairings, not a curve."""
    evals = [r for records in runs for r in records if r.get("type") == "eval"]
    return bool(evals) and not any(r.get("type") == "train" for records in runs for r in records) \
        and len({r["step"] for r in evals}) == 1


def plot_runs(run_dirs: list[str | Path], out: str | Path | None = None, ceiling: float | None = None,
              references: dict[str, float] | None = None, warn: Callable[[str], None] | None = None,
              group_by: str | None = None) -> Path:
    """Draw the runs' curves into a PNG: ``out``, or RUN_DIR/curve.png for one run and curve.png
    in the working directory for several. ``ceiling`` draws the best known win rate as a line;
    ``references`` ({label: exploitability}, e.g. the uniform policy's and CFR's) draw lines on
    the exploitability panel (log scale). ``warn`` gets a line for each thing a reader should
    know that the figure hides (runs of different length or status). A tournament is drawn as
    bars of win rate per pairing, with standard errors. ``group_by`` (a dotted config key, e.g.
    ``model_sampler.name``) averages the runs within each value of that key only: one curve and
    band a group (seeds x samplers on one figure)."""
    try:
        import matplotlib
    except ImportError:
        raise UnstableError("plotting needs matplotlib: pip install 'unstable-core[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [read_metrics(d) for d in run_dirs]
    names = [Path(d).name for d in run_dirs]
    for line in extent_warnings(runs, names):
        (warn or (lambda text: None))(line)
    titles = sorted({run_title(records, name) for records, name in zip(runs, names)})
    path = Path(out) if out else (Path(run_dirs[0]) / "curve.png" if len(run_dirs) == 1 else Path("curve.png"))
    if is_tournament(runs):
        save_figure(tournament_figure(runs, " / ".join(titles)), path)
        return path
    groups = [config_value(records, group_by) for records in runs] if group_by else None
    drawn = curves(runs, groups)
    if not drawn:
        raise UnstableError(f"{', '.join(map(str, run_dirs))}: metrics.jsonl has no eval or train records to plot")
    panels = [p for p in PANELS if p in drawn]
    rows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 4 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for label, s in drawn[panel].items():
            shown = label if s.runs == 1 else f"{label} (mean of {s.runs})"
            marker = "o" if len(s.steps) < 30 else None
            if s.error is not None and any(s.error):  # one run: the standard error of each evaluation
                line = ax.errorbar(s.steps, s.mean, yerr=s.error, marker=marker, capsize=3, label=shown).lines[0]
            else:
                (line,) = ax.plot(s.steps, s.mean, marker=marker, label=shown)
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
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    what = " / ".join(titles)
    title = what if len(names) == 1 else f"{what}: {len(names)} runs ({', '.join(names)}); bands: lowest to highest run"
    fig.suptitle(wrapped(title + ("" if len(names) > 1 else "; bars: standard error")), fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def wrapped(title: str, width: int = 110) -> str:
    """A figure title folded to lines that fit the figure (a long model spec would run off it);
    a line breaks at a space or, in a long word, at ``&`` or ``,``."""
    import re

    lines = [""]
    for piece in re.split(r"(?<=[ &,])", title):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += piece
    return "\n".join(lines)


def tournament_figure(runs: list[list[dict]], title: str) -> Any:
    """Win rates of every (env, model, opponent) pairing as horizontal bars with their standard
    errors (several runs: each pairing's games pooled)."""
    import matplotlib.pyplot as plt

    pooled: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # label -> [wins, games]
    for records in runs:
        for r in records:
            if r.get("type") == "eval":
                label = f"{r['env_id']}: {r.get('model', '')} vs {r['opponent']}"
                pooled[label][0] += r["win_rate"] * r.get("games", 0)
                pooled[label][1] += r.get("games", 0)
    labels = sorted(pooled)
    rates = [pooled[k][0] / pooled[k][1] if pooled[k][1] else 0.0 for k in labels]
    errors = [binomial_se(rate, int(pooled[k][1])) for rate, k in zip(rates, labels)]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(labels) + 1.5))
    ax.barh(labels, rates, xerr=errors, capsize=3, color="tab:blue", alpha=0.8)
    ax.set(xlim=(0, 1), xlabel="win rate (bars: standard error)")
    ax.tick_params(axis="y", labelsize=7)
    ax.invert_yaxis()
    fig.suptitle(wrapped(f"{title}: tournament"), fontsize=9)
    fig.tight_layout()
    return fig


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
