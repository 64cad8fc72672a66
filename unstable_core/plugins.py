"""The plugin system: a pluggy manager with per-plugin error isolation, tracing and the catalog.

A plugin that fails to register, whose registration hook raises, that implements an unknown hook,
or that returns a record of the wrong type is recorded with status ``error`` and unregistered; the
others keep working. How plugins are found and loaded (built-ins, entry points, the environment
switches) is in ``unstable_core.plugin_loading``; ``load_plugins`` builds a system from them.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pluggy
from pydantic import BaseModel

from . import hookspecs
from .components import KINDS, ComponentSpec
from .errors import ConfigError, PluginError, UnknownComponentError, describe_error
from .lazy import lazy_names

if TYPE_CHECKING:
    from .plugin_loading import PluginRecipe

GROUP = "unstable"
S = TypeVar("S", bound=ComponentSpec)
Status = Literal["active", "disabled", "error"]


@dataclass
class PluginRecord:
    """What `unstable plugins list` shows for one plugin."""

    name: str
    package: str
    version: str
    status: Status = "active"
    builtin: bool = False
    components: list[str] = field(default_factory=list)
    hooks: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "package": self.package,
            "version": self.version,
            "status": self.status,
            "builtin": self.builtin,
            "components": list(self.components),
            "hooks": list(self.hooks),
            "error": self.error,
        }


def truthy_env(var: str) -> bool:
    """Whether environment variable ``var`` is set to 1, true, yes or on."""
    return os.environ.get(var, "").strip().lower() in {"1", "true", "yes", "on"}


class PluginSystem:
    """A pluggy manager plus the records of every plugin and the component catalog."""

    def __init__(self, *, strict: bool | None = None, trace: bool | None = None) -> None:
        self.pm = pluggy.PluginManager(GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self.catalog: dict[tuple[str, str], tuple[ComponentSpec, PluginRecord]] = {}
        self.strict = truthy_env("UNSTABLE_STRICT_PLUGINS") if strict is None else strict
        self.trace = truthy_env("UNSTABLE_TRACE_PLUGINS") if trace is None else trace
        #: how to load the same plugins in another process (set by ``load_plugins``)
        self.recipe: PluginRecipe | None = None
        if self.trace:
            self.pm.add_hookcall_monitoring(self._trace_before, self._trace_after)

    # -- tracing ------------------------------------------------------------------------------
    @staticmethod
    def _trace_before(hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        names = ", ".join(i.plugin_name for i in impls)
        print(f"[unstable trace] {hook_name}({', '.join(kwargs)}) -> [{names}]", file=sys.stderr)

    @staticmethod
    def _trace_after(outcome: Any, hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        exc = outcome.exception
        state = f"raised {describe_error(exc)}" if exc else "ok"
        print(f"[unstable trace] {hook_name} {state}", file=sys.stderr)

    def call_impl(self, hook_name: str, impl: Any, **kwargs: Any) -> Any:
        """Call one plugin's implementation of a hook (per-plugin isolation), traced if asked.
        Like pluggy, pass only the arguments the implementation declares (it may take fewer)."""
        if self.trace:
            print(f"[unstable trace] {hook_name}({', '.join(kwargs)}) -> [{impl.plugin_name}]", file=sys.stderr)
        try:
            result = impl.function(*[kwargs[name] for name in impl.argnames])
        except BaseException as exc:
            if self.trace:
                print(f"[unstable trace] {hook_name} raised {describe_error(exc)}", file=sys.stderr)
            raise
        if self.trace:
            print(f"[unstable trace] {hook_name} ok", file=sys.stderr)
        return result

    def describe(self, plugin_name: str) -> str:
        """``plugin 'NAME' (DIST VERSION)``, for messages."""
        record = self.records.get(plugin_name)
        if record is None:
            return f"plugin {plugin_name!r}"
        return f"plugin '{record.name}' ({record.package} {record.version})"

    def call_lifecycle(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call every implementation of a lifecycle hook, one by one (traced like any hook call);
        an implementation that raises stops the run with a ComponentError naming its plugin."""
        return call_each(self.pm, hook_name, self.describe, kwargs, lambda impl: self.call_impl(hook_name, impl, **kwargs))

    def fail(self, name: str, exc: BaseException, where: str) -> None:
        """Record a plugin as broken (or re-raise in strict mode) and unregister it."""
        record = self.records.get(name)
        if record is None:
            raise exc
        self._fail(record, exc, where)

    # -- registration ---------------------------------------------------------------------------
    @property
    def hook(self) -> Any:
        return self.pm.hook

    def _fail(self, record: PluginRecord, exc: BaseException, where: str) -> None:
        if self.strict:
            raise exc
        record.status = "error"
        record.error = f"{where}: {describe_error(exc)}"
        record.components = []
        plugin = self.pm.get_plugin(record.name)
        if plugin is not None:
            self.pm.unregister(plugin)
        # drop anything this plugin had already added to the catalog
        self.catalog = {k: v for k, v in self.catalog.items() if v[1] is not record}

    def register(self, plugin: Any, *, name: str, package: str, version: str, builtin: bool = False) -> PluginRecord:
        """Register one plugin object (module or instance) and collect its components."""
        record = PluginRecord(name=name, package=package, version=version, builtin=builtin)
        self.records[name] = record
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:  # duplicate name, bad hookimpl signature
            self._fail(record, exc, "register")
            return record
        unknown = [
            impl.name
            for impl in self.pm.get_hookcallers(plugin) or []
            if not impl.has_spec()
        ]
        if unknown:
            self._fail(record, PluginError(f"implements unknown hook(s) {', '.join(unknown)}"), "register")
            return record
        record.hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or [])
        self._collect(plugin, record)
        return record

    def _collect(self, plugin: Any, record: PluginRecord) -> None:
        """Call this plugin's registration hooks one by one and add its records to the catalog."""
        added: list[tuple[str, str]] = []
        for kind, entry in KINDS.items():
            hook_name = entry.hook
            caller = getattr(self.pm.hook, hook_name)
            impls = [i for i in caller.get_hookimpls() if i.plugin is plugin]
            for impl in impls:
                try:
                    result = self.call_impl(hook_name, impl)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # SystemExit from a plugin is a broken plugin too
                    self._fail(record, exc, f"hook {hook_name} raised")
                    return
                try:
                    specs = self._check_result(result, entry.spec, hook_name)
                    for spec in specs:
                        options_problem = json_options_problem(spec)
                        if options_problem:
                            raise PluginError(options_problem)
                        key = (kind, spec.name)
                        if key in self.catalog:
                            other = self.catalog[key][1]
                            raise PluginError(
                                f"duplicate component {kind}:{spec.name}: provided by plugin '{other.name}' "
                                f"({other.package} {other.version}) and plugin '{record.name}' "
                                f"({record.package} {record.version})"
                            )
                        self.catalog[key] = (spec, record)
                        added.append(key)
                except Exception as exc:
                    for key in added:
                        self.catalog.pop(key, None)
                    self._fail(record, exc, f"hook {hook_name}")
                    return
        record.components = [f"{k}:{n}" for k, n in added]

    @staticmethod
    def _check_result(result: Any, spec_cls: type[ComponentSpec], hook_name: str) -> list[ComponentSpec]:
        if result is None:
            return []
        if not isinstance(result, (list, tuple)):
            raise PluginError(f"{hook_name} must return a list of {spec_cls.__name__}, got {type(result).__name__}")
        for item in result:
            if not isinstance(item, spec_cls):
                raise PluginError(f"{hook_name} must return {spec_cls.__name__} records, got {type(item).__name__}")
        return list(result)

    def add_disabled(self, name: str, package: str, version: str, builtin: bool = False) -> None:
        self.records[name] = PluginRecord(name=name, package=package, version=version, status="disabled", builtin=builtin)

    # -- catalog --------------------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        return sorted(n for k, n in self.catalog if k == kind)

    def get(self, kind: str, name: str) -> ComponentSpec:
        """The spec registered as (kind, name), or a clear error listing what exists."""
        if kind not in KINDS:
            raise UnknownComponentError(f"unknown component kind {kind!r}; kinds are: {', '.join(KINDS)}")
        found = self.catalog.get((kind, name))
        if found is not None:
            return found[0]
        known = self.names(kind)
        msg = f"unknown {kind} {name!r}."
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            msg += f" Did you mean {close[0]!r}?"
        msg += f" Known {kind} components: {', '.join(known) if known else '(none)'}."
        broken = [r for r in self.records.values() if r.status == "error"]
        if broken:
            msg += " Plugins that failed to load: " + "; ".join(f"{r.name} ({r.package}): {r.error}" for r in broken) + "."
        disabled = [r.name for r in self.records.values() if r.status == "disabled"]
        if disabled:
            msg += f" Disabled plugins: {', '.join(disabled)}."
        raise UnknownComponentError(msg)

    def spec(self, record: type[S], name: str) -> S:
        """``get(record.kind, name)`` typed as its record class, e.g. ``spec(InferenceSpec, "hf")``."""
        found = self.get(record.kind, name)
        assert isinstance(found, record)  # the catalog checked each record's class when it was collected
        return found

    def provider_of(self, kind: str, name: str) -> PluginRecord:
        self.get(kind, name)
        return self.catalog[(kind, name)][1]

    def plugin_records(self, include_builtin: bool = True) -> list[PluginRecord]:
        return [r for r in self.records.values() if include_builtin or not r.builtin]


def call_each(pm: pluggy.PluginManager, hook_name: str, describe: Any, kwargs: dict[str, Any], call: Any = None) -> list[tuple[str, Any]]:
    """Call each implementation of ``hook_name`` in ``pm`` (pluggy's order) with the arguments
    it declares (or through ``call(impl)``); return ``(plugin name, result)`` for each result
    that is not None. ``describe(plugin_name)`` names the culprit when one raises: a
    ComponentError, never a bare traceback."""
    from .errors import ComponentError, UnstableError

    caller = getattr(pm.hook, hook_name)
    results = []
    for impl in reversed(caller.get_hookimpls()):  # pluggy calls the last registered first
        try:
            value = call(impl) if call is not None else impl.function(*[kwargs[name] for name in impl.argnames])
        except UnstableError:
            raise
        except Exception as exc:
            raise ComponentError(f"{describe(impl.plugin_name)}: hook {hook_name} raised {describe_error(exc)}") from exc
        if value is not None:
            results.append((impl.plugin_name, value))
    return results


def json_options_problem(spec: ComponentSpec) -> str | None:
    """Options travel as JSON (a run's plan, its config.json, ``config schema``): a field of the
    spec's options models (``config``, an inference backend's ``model_options``) whose type has
    no JSON schema or whose default cannot be written as JSON (a callable, an object) is named
    here, so that the plugin is refused when it loads rather than the run when it starts."""
    from pydantic import TypeAdapter
    from pydantic_core import PydanticUndefined

    models = [spec.config, getattr(spec, "model_options", None)]
    for model in [m for m in models if isinstance(m, type) and issubclass(m, BaseModel)]:
        for name, info in model.model_fields.items():
            try:
                adapter: TypeAdapter[Any] = TypeAdapter(Any if info.annotation is None else info.annotation)
                adapter.json_schema()
                if info.default is not PydanticUndefined:
                    adapter.dump_python(info.default, mode="json")
            except Exception as exc:
                reason = describe_error(exc, limit=120)
                return (f"{spec.kind} {spec.name!r}: option {name!r} ({model.__name__}.{name}) cannot be written as JSON "
                        f"({reason}): an option must be a JSON value (number, string, boolean, list, table)")
    return None


_CACHED: PluginSystem | None = None


def checked_plugins(plugins: Any) -> PluginSystem:
    """``plugins`` as given to the Python API: a PluginSystem, or None for the process's."""
    if plugins is None:
        return get_plugin_system()
    if not isinstance(plugins, PluginSystem):
        raise ConfigError(f"plugins must be a PluginSystem (from unstable_core.load_plugins) or None, not {type(plugins).__name__}")
    return plugins


def get_plugin_system() -> PluginSystem:
    """The process-wide plugin system (built on first use)."""
    global _CACHED
    if _CACHED is None:
        from .plugin_loading import load_plugins

        _CACHED = load_plugins()
    return _CACHED



#: ``load_plugins`` and ``PluginRecipe`` live in ``plugin_loading`` (which imports this module).
_lazy = lazy_names(__name__, {"load_plugins": "plugin_loading", "PluginRecipe": "plugin_loading"})


def __getattr__(name: str) -> Any:
    return _lazy(name)
