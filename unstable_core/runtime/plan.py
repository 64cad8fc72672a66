"""Recipes and plans: what a run is made of, in a form that crosses process boundaries.

A ``Recipe`` names one component (kind, name, validated options, seed); a ``RunPlan`` is the
resolved config plus a recipe per config key (``make_plan``, after the config passed
``check_run``). Roles build their components from the plan where they run (``building.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from ..config import RunConfig
from ..config_check import check_run, validate_options
from .seeds import derive_seed

if TYPE_CHECKING:  # pragma: no cover
    from ..plugins import PluginSystem


class Recipe(BaseModel):
    """One component to build: picklable, validated options as JSON."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    kind: str
    name: str
    options: dict[str, Any]
    seed: int


class RunPlan(BaseModel):
    """Everything an executor needs to place the roles of a run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config: RunConfig
    run_dir: str
    source: str = "<config>"
    recipes: dict[str, Recipe]

    @property
    def trains(self) -> bool:
        return self.config.learner is not None


def make_plan(cfg: RunConfig, system: PluginSystem, run_dir: str, source: str = "<config>") -> RunPlan:
    """Check a config and turn it into a plan: one recipe per component key, plus one per
    inference backend that serves only opponents (``backends.NAME``)."""
    resolved = check_run(cfg, system, source)
    recipes = {
        key: Recipe(key=key, kind=spec.kind, name=spec.name, options=opts.model_dump(mode="json"), seed=derive_seed(cfg.seed, key))
        for key, (spec, opts) in resolved.items()
    }
    backends = {o.backend for o in cfg.opponents} | set(cfg.backends)
    for name in sorted(backends - {cfg.inference.name}):
        spec = system.get("inference", name)
        opts = validate_options(spec, cfg.backends.get(name, {}), source, f"backends.{name}", strict=True)
        key = f"backends.{name}"
        recipes[key] = Recipe(key=key, kind="inference", name=name, options=opts.model_dump(mode="json"), seed=derive_seed(cfg.seed, key))
    return RunPlan(config=cfg, run_dir=run_dir, source=source, recipes=recipes)
