"""Building components in the process where a role runs: a factory's product checked against its
kind's protocol, any error it raises named with its component and plugin (``instantiate``), the
components of a plan built by config key (``Builder``), and one component outside a run
(``build_component``, public)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy
from pydantic import BaseModel

from .. import hookspecs
from ..components import KINDS, BuildContext
from ..config_check import validate_options
from ..errors import ComponentError, ConfigError, PluginError, UnstableError, describe_error
from ..types import ModelRef
from .plan import RunPlan
from .seeds import derive_seed

if TYPE_CHECKING:  # pragma: no cover
    from ..plugins import PluginSystem


def component_label(system: PluginSystem, kind: str, name: str) -> str:
    """``kind 'name' from plugin 'p' (dist version)``: how messages name a component."""
    record = system.provider_of(kind, name)
    return f"{kind} {name!r} from plugin '{record.name}' ({record.package} {record.version})"


def instantiate(system: PluginSystem, kind: str, name: str, options: BaseModel, ctx: BuildContext) -> Any:
    """Call a component's factory and check its product; anything it raises becomes one
    message naming the component and its plugin."""
    spec = system.get(kind, name)
    try:
        obj = spec.factory(options, ctx)
    except UnstableError:
        raise
    except (Exception, SystemExit) as exc:
        raise PluginError(f"{component_label(system, kind, name)} could not be built: {describe_error(exc)}") from exc
    proto = KINDS[kind].protocol
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
    plugins: PluginSystem | None = None,
    run_dir: str | None = None,
    seed: int = 0,
    model: ModelRef | None = None,
) -> Any:
    """Build one component outside a run, e.g. ``build_component("template", "qwen3-zs")``.

    ``options`` are validated by the component's own model (a ConfigError names the bad key);
    ``plugins`` is a ``PluginSystem`` (default: the process's, every installed plugin)."""
    from ..plugins import checked_plugins

    plugins = checked_plugins(plugins)
    if options is not None and not isinstance(options, Mapping):
        raise ConfigError(f"{kind}:{name}: options are a table (a dict), not {type(options).__name__}")
    spec = plugins.get(kind, name)
    opts = validate_options(spec, options or {}, f"{kind}:{name}", "")

    def build(k: str, n: str, o: Mapping[str, Any] | None = None) -> Any:
        return build_component(k, n, o, plugins=plugins, run_dir=run_dir, seed=derive_seed(seed, k, n), model=model)

    ctx = BuildContext(run_dir=run_dir, seed=seed, model=model, plugins=plugins, build=build)
    return instantiate(plugins, kind, name, opts, ctx)


class Listeners:
    """Components that subscribed (``ctx.subscribe``) to the lifecycle events of one role."""

    def __init__(self) -> None:
        self.pm: pluggy.PluginManager | None = None  # made by the first subscriber: most runs have none
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

    def __init__(self, plan: RunPlan, system: PluginSystem) -> None:
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
        return instantiate(self.system, recipe.kind, recipe.name, self.options(key), self.context(recipe.seed))

    def options(self, key: str) -> BaseModel:
        """The validated options of recipe ``key``."""
        return validate_options(self.spec(key), self.plan.recipes[key].options, self.plan.source, key)

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


def guarded(label: str, what: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; an exception (a ``sys.exit`` too) becomes a ComponentError naming the component."""
    try:
        return fn(*args)
    except UnstableError:
        raise
    except (Exception, SystemExit) as exc:
        raise ComponentError(f"{label}: {what} raised {describe_error(exc)}") from exc
