"""Loading plugins: the core's built-ins, then entry points, under the environment switches.

Loading order: the core's built-in plugin modules (``unstable_core.builtin.*``), then every entry
point of group ``unstable``, one at a time, then any ``extra`` plugin objects given to
``load_plugins``. Each goes through ``PluginSystem.register``, which isolates a broken plugin.

Environment switches:

``UNSTABLE_LOAD_PLUGINS``     comma list of entry-point or distribution names to load; set but
                              empty loads no entry-point plugin (built-ins always load).
``UNSTABLE_DISABLE_PLUGINS``  comma list of plugin or distribution names not to load (status
                              ``disabled``); built-ins may be disabled too, by their name.
``UNSTABLE_STRICT_PLUGINS=1`` re-raise a plugin's error instead of recording it (for authors).
``UNSTABLE_TRACE_PLUGINS=1``  print each hook call and its result to stderr.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import __version__
from .errors import PluginError
from .plugins import GROUP, PluginRecord, PluginSystem, truthy_env

CORE_DIST = "unstable-core"

#: The core's own plugin modules, registered before any entry point.
BUILTIN_MODULES = (
    "env_textarena",
    "templates",
    "samplers",
    "raters",
    "transforms",
    "buffers",
    "inference_scripted",
    "executor_local",
    "trackers",
)


def _env_list(var: str) -> list[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return [x.strip() for x in raw.split(",") if x.strip()]


def load_builtins(system: PluginSystem, disabled: Iterable[str] = ()) -> None:
    """Register the core's built-in plugin modules, except those named in ``disabled``."""
    disabled = set(disabled)
    for short in BUILTIN_MODULES:
        name = f"core.{short}"
        if name in disabled or short in disabled:
            system.add_disabled(name, CORE_DIST, __version__, builtin=True)
            continue
        module = importlib.import_module(f"unstable_core.builtin.{short}")
        system.register(module, name=name, package=CORE_DIST, version=__version__, builtin=True)


def load_entry_points(system: PluginSystem, load: list[str] | None = None, disabled: Iterable[str] = ()) -> None:
    """Import and register each entry point of group ``unstable``: only those named in ``load``
    (when given, by entry-point or distribution name), none named in ``disabled``. A plugin whose
    import fails is recorded as broken; an unknown name in ``load`` is a PluginError."""
    from importlib.metadata import entry_points

    disabled = set(disabled)
    seen: set[str] = set()
    found = sorted(entry_points(group=GROUP), key=lambda e: e.name)
    if load is not None:
        dists = [getattr(ep, "dist", None) for ep in found]
        known = {ep.name for ep in found} | {dist.name for dist in dists if dist is not None}
        unknown = [name for name in load if name not in known]
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise PluginError(f"UNSTABLE_LOAD_PLUGINS names {', '.join(map(repr, unknown))}, which no installed plugin "
                              f"is.{hint} Installed: {', '.join(sorted(ep.name for ep in found)) or '(none)'}")
    for ep in found:
        if ep.name in seen:  # the same distribution found twice on sys.path
            continue
        seen.add(ep.name)
        dist = getattr(ep, "dist", None)
        package = dist.name if dist is not None else "?"
        version = dist.version if dist is not None else "?"
        names = {ep.name, package}
        if names & disabled or (load is not None and not names & set(load)):
            system.add_disabled(ep.name, package, version)
            continue
        try:
            plugin = ep.load()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # sys.exit() in a plugin's import must not end the CLI
            system.records[ep.name] = PluginRecord(name=ep.name, package=package, version=version)
            system.fail(ep.name, exc, "import failed")
            continue
        system.register(plugin, name=ep.name, package=package, version=version)


def load_plugins(
    *,
    builtins: bool = True,
    entry_points: bool = True,
    extra: Iterable[tuple[str, Any]] = (),
    strict: bool | None = None,
    trace: bool | None = None,
) -> PluginSystem:
    """Build a fresh plugin system: built-ins, then entry points (honouring the env switches),
    then ``extra`` (name, plugin object) pairs registered as if they were installed plugins."""
    recipe = PluginRecipe(
        builtins=builtins, entry_points=entry_points, extra=tuple(extra),
        strict=truthy_env("UNSTABLE_STRICT_PLUGINS") if strict is None else strict,
        trace=truthy_env("UNSTABLE_TRACE_PLUGINS") if trace is None else trace,
        disabled=tuple(_env_list("UNSTABLE_DISABLE_PLUGINS") or ()), only=_env_list("UNSTABLE_LOAD_PLUGINS"),
    )
    return recipe.load()


@dataclass(frozen=True)
class PluginRecipe:
    """How a plugin system was loaded, picklable: another process (a Ray actor) loads the same
    plugins with ``recipe.load()``. ``PluginSystem.recipe`` holds it for systems made by
    ``load_plugins``; a plugin module in ``extra`` travels by its import name."""

    builtins: bool = True
    entry_points: bool = True
    extra: tuple[tuple[str, Any], ...] = ()
    strict: bool = False
    trace: bool = False
    disabled: tuple[str, ...] = ()
    only: list[str] | None = None  # UNSTABLE_LOAD_PLUGINS

    def load(self) -> PluginSystem:
        """A fresh plugin system loaded this way, in this process."""
        system = PluginSystem(strict=self.strict, trace=self.trace)
        if self.builtins:
            load_builtins(system, self.disabled)
        if self.entry_points:
            load_entry_points(system, self.only, self.disabled)
        for name, plugin in self.extra:
            if isinstance(plugin, _ModuleByName):
                plugin = importlib.import_module(plugin.name)
            system.register(plugin, name=name, package=getattr(plugin, "__name__", name), version="0")
        system.recipe = self
        return system

    def __reduce__(self) -> Any:
        extra = tuple((name, _ModuleByName(p.__name__) if isinstance(p, type(sys)) else p) for name, p in self.extra)
        return (PluginRecipe, (self.builtins, self.entry_points, extra, self.strict, self.trace, self.disabled, self.only))


class _ModuleByName:
    """A plugin module, pickled as its import name."""

    def __init__(self, name: str) -> None:
        self.name = name


