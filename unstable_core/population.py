"""A run's population of checkpoints, read from its run directory, as models another process can
serve: each checkpoint (the base model included) with the run's inference backend and options,
and the mixtures of them the run offers ('uniform': every checkpoint alike, fictitious play's
output; 'meta': the mixture its model sampler targets, psro's, as ``registry.json`` holds it).
`unstable exploitability RUN_DIR --mixture` and the `mixture` backend (unstable-population) read
runs through these functions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import UnstableError
from .types import ModelRef

MIXTURES = ("uniform", "meta")


def run_config(run_dir: str | Path) -> dict[str, Any]:
    """The resolved config the run wrote to config.json."""
    try:
        config = json.loads((Path(run_dir) / "config.json").read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnstableError(f"{run_dir}: unreadable config.json ({exc})") from None
    if not isinstance(config, dict):
        raise UnstableError(f"{run_dir}: config.json holds no config")
    return config


def checkpoint_uids(run_dir: str | Path) -> list[str]:
    """The run's saved checkpoints (``ckpt-N``), oldest first."""
    return sorted((p.name for p in (Path(run_dir) / "checkpoints").glob("ckpt-*") if p.name.split("-")[-1].isdigit()),
                  key=lambda n: int(n.split("-")[-1]))


def run_inference(run_dir: str | Path) -> tuple[str, dict[str, Any]]:
    """The name and options of the inference backend that served the run's model."""
    inference = dict(run_config(run_dir).get("inference") or {})
    return str(inference.pop("name", "hf")), inference


def run_model(run_dir: str | Path, uid: str) -> ModelRef:
    """The ModelRef that serves checkpoint ``uid`` of the run (``base``: the model before
    training) with the run's backend, as the run served it."""
    root = Path(run_dir)
    config = run_config(root)
    backend, _ = run_inference(root)
    model = str((config.get("model") or {}).get("model", ""))
    if uid == "base":
        return ModelRef(uid="base", kind="base", backend=backend, model=model)
    names = checkpoint_uids(root)
    if uid not in names:
        shown = names if len(names) <= 8 else [*names[:3], f"... {len(names) - 6} more ...", *names[-3:]]
        raise UnstableError(f"{run_dir}: no checkpoint {uid!r} (it has {', '.join(shown) or 'none'}; 'base' is the model "
                            "before training)")
    return ModelRef(uid=uid, kind="checkpoint", backend=backend, model=model, adapter_path=str(root / "checkpoints" / uid),
                    version=int(uid.split("-")[-1]))


def run_mixture(run_dir: str | Path, mixture: str = "uniform") -> list[tuple[ModelRef, float]]:
    """The run's population mixture as (model, weight) pairs, the weights summing to 1."""
    root = Path(run_dir)
    if not (root / "checkpoints").is_dir():
        raise UnstableError(f"{run_dir}: not a run directory with checkpoints")
    if mixture == "uniform":
        weights = {uid: 1.0 for uid in ["base", *checkpoint_uids(root)]}
    elif mixture == "meta":
        weights = meta_weights(root)
    else:
        raise UnstableError(f"mixture {mixture!r}: one of {', '.join(MIXTURES)}")
    total = sum(weights.values())
    return [(run_model(root, uid), w / total) for uid, w in weights.items()]


def meta_weights(run_dir: Path) -> dict[str, float]:
    """The mixture the run's model sampler targeted when registry.json was last written."""
    try:
        registry = json.loads((run_dir / "registry.json").read_text())
    except (OSError, ValueError) as exc:
        raise UnstableError(f"{run_dir}: unreadable registry.json ({exc})") from None
    mixture = registry.get("mixture") if isinstance(registry, dict) else None
    if not isinstance(mixture, dict) or not mixture:
        raise UnstableError(f"{run_dir}: registry.json holds no meta mixture (a model sampler that targets one, psro, writes it there); "
                            "use the uniform mixture")
    try:
        weights = {str(uid): float(w) for uid, w in mixture.items() if float(w) > 0}
    except (TypeError, ValueError):
        raise UnstableError(f"{run_dir}: registry.json's mixture is not uid -> weight") from None
    if not weights:
        raise UnstableError(f"{run_dir}: registry.json's mixture has no weight above 0")
    return weights
