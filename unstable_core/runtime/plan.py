"""Recipes and plans: what a run is made of, in a form that crosses process boundaries.

A ``Recipe`` names one component (kind, name, validated options, seed); a ``RunPlan`` is the
resolved config plus a recipe per config key. Roles build their components from the plan where
they run, with the plugins loaded in that process (``Builder``). ``build_component`` builds one
component outside a run: the same code path, public.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pluggy
from pydantic import BaseModel, ConfigDict, ValidationError

from .. import hookspecs
from ..components import BuildContext
from ..config import RunConfig
from ..config_components import resolve_components, validate_options
from ..config_loading import format_validation_error
from ..errors import ComponentError, ConfigError, PluginError, UnstableError, describe_error
from ..protocols import PROTOCOLS
from ..types import ModelRef
from .runner import derive_seed


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


def component_label(system: Any, kind: str, name: str) -> str:
    """``kind 'name' from plugin 'p' (dist version)``: how messages name a component."""
    record = system.provider_of(kind, name)
    return f"{kind} {name!r} from plugin '{record.name}' ({record.package} {record.version})"


def instantiate(system: Any, kind: str, name: str, options: BaseModel, ctx: BuildContext) -> Any:
    """Call a component's factory and check its product; anything it raises becomes one
    message naming the component and its plugin."""
    spec = system.get(kind, name)
    try:
        obj = spec.factory(options, ctx)
    except UnstableError:
        raise
    except (Exception, SystemExit) as exc:
        raise PluginError(f"{component_label(system, kind, name)} could not be built: {describe_error(exc)}") from exc
    proto = PROTOCOLS.get(kind)
    if proto is not None and not isinstance(obj, proto):
        raise PluginError(
            f"{component_label(system, kind, name)}: its factory returned {type(obj).__name__}, which lacks the {proto.__name__} protocol"
        )
    if kind == "reward_transform" and not callable(obj):
        raise PluginError(f"{component_label(system, kind, name)}: its factory must return a callable")
    return obj


def build_component(
    kind: str,
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    plugins: Any = None,
    run_dir: str | None = None,
    seed: int = 0,
    model: ModelRef | None = None,
) -> Any:
    """Build one component outside a run, e.g. ``build_component("template", "qwen3-zs")``.

    ``options`` are validated by the component's own model (a ConfigError names the bad key);
    ``plugins`` is a ``PluginSystem`` (default: the process's, every installed plugin)."""
    if plugins is None:
        from ..plugins import get_plugin_system

        plugins = get_plugin_system()
    spec = plugins.get(kind, name)
    opts = validate_options(spec, options or {}, f"{kind}:{name}", "")

    def build(k: str, n: str, o: Mapping[str, Any] | None = None) -> Any:
        return build_component(k, n, o, plugins=plugins, run_dir=run_dir, seed=derive_seed(seed, k, n), model=model)

    ctx = BuildContext(run_dir=run_dir, seed=seed, model=model, plugins=plugins, build=build)
    return instantiate(plugins, kind, name, opts, ctx)


class Listeners:
    """Components that subscribed (``ctx.subscribe``) to the lifecycle events of one role."""

    def __init__(self) -> None:
        self.pm: pluggy.PluginManager | None = None  # made by the first subscriber (~1 ms, most runs have none)
        self.names: dict[str, str] = {}

    def subscribe(self, component: Any) -> None:
        if self.pm is None:
            self.pm = pluggy.PluginManager("unstable")
            self.pm.add_hookspecs(hookspecs)
        name = f"component-{len(self.names)}"
        self.pm.register(component, name=name)
        self.names[name] = f"component {type(component).__name__}"

    def wants(self, hook_name: str) -> bool:
        return self.pm is not None and bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    def emit(self, hook_name: str, ctx: Any) -> None:
        from ..plugins import call_each

        if self.pm is not None:
            call_each(self.pm, hook_name, lambda n: self.names.get(n, n), {"ctx": ctx})


class Builder:
    """Builds a plan's components in this process (one per role), with one ``Listeners``."""

    def __init__(self, plan: RunPlan, system: Any) -> None:
        self.plan = plan
        self.system = system
        self.listeners = Listeners()
        self.model = plan.config.model_ref()
        self._config = plan.config.model_dump(mode="json")

    def context(self, seed: int) -> BuildContext:
        return BuildContext(
            run_dir=self.plan.run_dir, seed=seed, config=self._config, model=self.model, plugins=self.system,
            build=self.named, subscribe=self.listeners.subscribe,
        )

    def build(self, key: str) -> Any:
        recipe = self.plan.recipes[key]
        options = validate_options(self.spec(key), recipe.options, self.plan.source, key)
        return instantiate(self.system, recipe.kind, recipe.name, options, self.context(recipe.seed))

    def spec(self, key: str) -> Any:
        """The component spec behind recipe ``key``."""
        recipe = self.plan.recipes[key]
        return self.system.get(recipe.kind, recipe.name)

    def named(self, kind: str, name: str, options: Mapping[str, Any] | None = None) -> Any:
        spec = self.system.get(kind, name)
        opts = validate_options(spec, options or {}, self.plan.source, f"{kind}:{name}")
        return instantiate(self.system, kind, name, opts, self.context(derive_seed(self.plan.config.seed, kind, name)))

    def label(self, key: str) -> str:
        recipe = self.plan.recipes[key]
        return component_label(self.system, recipe.kind, recipe.name)


def check_run(cfg: RunConfig, system: Any, source: str = "<config>") -> dict[str, tuple[Any, BaseModel]]:
    """Everything that can be checked without playing: the components and their options
    (``resolve_components``), each component's options against the rest of the run (its
    ``check_run``), every environment (its provider's ``check_env``), every model
    (its backend's ``check_model`` and per-model ``options``). Raises one ConfigError listing
    every problem."""
    resolved = resolve_components(cfg, system, source)
    problems: list[str] = []
    env_spec, env_options = resolved["env"]
    if env_spec.check_env is not None:
        seen: set[str] = set()
        envs = [("train_envs", i, e) for i, e in enumerate(cfg.train_envs)]
        envs += [("eval_envs", i, e) for i, e in enumerate(cfg.eval_envs or [])]
        for section, i, env in envs:
            key = env.model_dump_json(include={"env_id", "num_players", "kwargs"})
            if key in seen:
                continue
            seen.add(key)
            try:
                env_spec.check_env(env, env_options)
            except UnstableError:
                raise
            except Exception as exc:  # a ValueError is the provider's own message
                reason = str(exc) if isinstance(exc, ValueError) and str(exc) else describe_error(exc)
                problems.append(f"{source}: {section}.{i}: {reason}")
    chosen = {key: opts for key, (_, opts) in resolved.items()}
    for key, (spec, opts) in resolved.items():
        if spec.check_run is not None:
            try:
                spec.check_run(opts, chosen)
            except Exception as exc:
                problems.append(f"{source}: {key}: {exc if isinstance(exc, ValueError) else describe_error(exc)}")
    refs = [(f"opponents.{i}", o.ref()) for i, o in enumerate(cfg.opponents)]
    base = cfg.model_ref()
    if base is not None:
        refs.append(("model", base))
    for key, ref in refs:
        spec = system.get("inference", ref.backend)
        try:
            spec.model_options.model_validate(ref.options)
        except ValidationError as exc:
            problems.append(format_validation_error(exc, source, prefix=f"{key}.options", model=spec.model_options))
        if spec.check_model is not None:
            try:
                spec.check_model(ref)
            except Exception as exc:
                problems.append(f"{source}: {key}: {exc}")
    if base is not None and cfg.learner is not None and not system.get("inference", base.backend).serves_checkpoints:
        problems.append(f"{source}: model: backend {base.backend!r} serves fixed models only and cannot load the learner's "
                        "checkpoints: serve the trained model with a backend that can (hf, vllm); use this one for opponents")
    if base is not None and base.uid in {o.uid for o in cfg.opponents}:
        problems.append(f"{source}: model.uid {base.uid!r} is also an opponent uid")
    if problems:
        raise ConfigError("\n".join(problems))
    return resolved


def make_plan(cfg: RunConfig, system: Any, run_dir: str, source: str = "<config>") -> RunPlan:
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
        opts = validate_options(spec, cfg.backends.get(name, {}), source, f"backends.{name}")
        key = f"backends.{name}"
        recipes[key] = Recipe(key=key, kind="inference", name=name, options=opts.model_dump(mode="json"), seed=derive_seed(cfg.seed, key))
    return RunPlan(config=cfg, run_dir=run_dir, source=source, recipes=recipes)


def guarded(label: str, what: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; an exception becomes a ComponentError naming the component."""
    try:
        return fn(*args)
    except UnstableError:
        raise
    except Exception as exc:
        raise ComponentError(f"{label}: {what} raised {describe_error(exc)}") from exc


__all__ = ["Recipe", "RunPlan", "Builder", "Listeners", "build_component", "check_run", "make_plan", "guarded"]
