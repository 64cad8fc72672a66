"""`unstable plot RUN_DIR`: evaluation and training curves from metrics.jsonl (matplotlib)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from .errors import UnstableError


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise UnstableError(f"{run_dir}: no metrics.jsonl (is this a run directory?)")
    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                raise UnstableError(f"{path}:{n}: not valid JSON") from None
    return records


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    try:
        import matplotlib
    except ImportError:
        raise UnstableError("plotting needs matplotlib: pip install 'unstable-core[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(run_dir)
    train = [r for r in records if r.get("type") == "train"]
    # a training run: one curve per (env, opponent) across checkpoints; a tournament: per agent too
    curves: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r.get("type") == "eval":
            label = f"{r['env_id']} vs {r['opponent']}" if train else f"{r['env_id']}: {r.get('model', '')} vs {r['opponent']}"
            curves[label].append(r)
    if not curves and not train:
        raise UnstableError(f"{run_dir}: metrics.jsonl has no eval or train records to plot")
    fig, axes = plt.subplots(1, 3 if train else 2, figsize=(15 if train else 10, 4))
    for label, rs in sorted(curves.items()):
        rs = sorted(rs, key=lambda r: r["step"])
        axes[0].plot([r["step"] for r in rs], [r["win_rate"] for r in rs], marker="o", label=label)
        axes[1].plot([r["step"] for r in rs], [r["invalid_rate"] for r in rs], marker="o", label=label)
    axes[0].set(title="win rate", xlabel="learner step", ylim=(0, 1))
    axes[1].set(title="invalid-move rate", xlabel="learner step", ylim=(0, 1))
    axes[0].legend(fontsize=7)
    if train:
        axes[2].plot([r["step"] for r in train], [r.get("loss", 0.0) for r in train], label="loss")
        axes[2].plot([r["step"] for r in train], [r.get("grad_norm", 0.0) for r in train], label="grad norm (before clip)")
        axes[2].set(title="training", xlabel="learner step")
        axes[2].legend(fontsize=7)
    fig.suptitle(str(Path(run_dir).name))
    fig.tight_layout()
    path = Path(out) if out else Path(run_dir) / "curve.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
