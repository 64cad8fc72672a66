"""``unstable plugins``, ``unstable components`` and ``unstable envs``: what is installed, as
tables or JSON (``cli.py`` adds these groups to the command line)."""

from __future__ import annotations

import json
from typing import Any

import click

from .errors import UnstableError


def plugin_system() -> Any:
    """The process's plugin system (loaded on first use)."""
    from .plugins import get_plugin_system

    return get_plugin_system()


def rich_console() -> Any:
    from rich.console import Console

    return Console()


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


# -- plugins --------------------------------------------------------------------------------------


@click.group()
def plugins() -> None:
    """Installed plugins."""


@plugins.command("list", short_help="Installed plugins: version, status, components.")
@click.option("--all", "show_all", is_flag=True, help="Include the core's built-in plugins.")
@click.option("--long", "long", is_flag=True, help="Add each plugin's package and hooks.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of plugin objects.")
def plugins_list(show_all: bool, long: bool, as_json: bool) -> None:
    """List plugins: name, version, status and components (with --long: package and hooks too).
    A plugin that fails to load is listed with status error and the reason. Always exits 0.

    \b
    Example: unstable plugins list --all --long
    """
    records = [r for r in plugin_system().plugin_records() if show_all or not r.builtin]
    if as_json:
        print_json([r.as_dict() for r in records])
        return
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    if not records:
        click.echo("No plugins installed (use --all to include the built-ins).")
        return
    console = rich_console()
    colour = {"active": "green", "disabled": "yellow", "error": "red"}
    if long:  # a block a plugin: whole names at any width
        for r in records:
            console.print(Text.assemble((r.name, "bold"), f" {r.version} ({r.package}) ", (r.status, colour[r.status])))
            if r.status == "error":
                console.print(Padding(Text(r.error or "", style="red"), (0, 0, 0, 2)))
            for label, names in (("components", r.components), ("hooks", [h for h in r.hooks if h.startswith("unstable_")])):
                if names:
                    console.print(Padding(Text(f"{label}: " + ", ".join(names)), (0, 0, 0, 2)))
        return
    table = Table(title="unstable plugins")
    for col in ("Name", "Version", "Status", "Components"):  # names on one line; components one a line
        table.add_column(col, no_wrap=col != "Components", overflow="fold")
    for r in records:
        comps = Text("\n".join(by_kind(r.components))) if r.status != "error" else Text(r.error or "", style="red")
        table.add_row(Text(r.name), Text(r.version), Text(r.status, style=colour[r.status]), comps)
    console.print(table)


def by_kind(components: list[str]) -> list[str]:
    """``kind:name`` entries as a line a kind, ``kind: name, name`` (lines wrap between names)."""
    kinds: dict[str, list[str]] = {}
    for entry in components:
        kind, _, name = entry.partition(":")
        kinds.setdefault(kind, []).append(name)
    return [f"{kind}: {', '.join(names)}" for kind, names in kinds.items()]


# -- components -----------------------------------------------------------------------------------


@click.group()
def components() -> None:
    """Components offered by the loaded plugins."""


def type_label(annotation: Any) -> str:
    """An option's type as a reader needs it: the allowed values of a Literal, ``X | None`` for
    an Optional, element types of containers."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_label(a) for a in args)
    if origin is typing.Annotated:
        return type_label(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_label(a) for a in args)}]" if args else name
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _option_rows(spec: Any) -> list[dict[str, Any]]:
    from pydantic_core import PydanticUndefined

    rows = []
    for name, f in spec.config.model_fields.items():
        default = None if f.default is PydanticUndefined and f.default_factory is None else (
            f.default_factory() if f.default_factory is not None else f.default
        )
        rows.append({"name": name, "type": type_label(f.annotation), "default": default, "required": f.is_required(),
                     "description": f.description or ""})
    return rows


@components.command("list", short_help="Every component of the loaded plugins, by kind.")
@click.option("--kind", default=None, help="Only components of this kind.")
@click.option("--long", "long", is_flag=True, help="Whole summaries, wrapped (default: one line each).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def components_list(kind: str | None, long: bool, as_json: bool) -> None:
    """List components: kind, name, summary, plugin.

    \b
    Example: unstable components list --kind model_sampler
    """
    from .components import KINDS

    if kind is not None and kind not in KINDS:
        raise UnstableError(f"unknown kind {kind!r}; kinds are: {', '.join(KINDS)}")
    system = plugin_system()
    rows = [
        {"kind": k, "name": n, "summary": spec.summary, "plugin": rec.name, "package": rec.package,
         **({"stage": spec.stage} if hasattr(spec, "stage") else {})}
        for (k, n), (spec, rec) in sorted(system.catalog.items(), key=lambda kv: (list(KINDS).index(kv[0][0]), kv[0][1]))
        if kind is None or k == kind
    ]
    if as_json:
        print_json(rows)
        return
    from rich.table import Table
    from rich.text import Text

    console = rich_console()
    name_w = max(len(r["name"]) for r in rows) if rows else 4
    plugin_w = max(len(r["plugin"]) for r in rows) if rows else 6
    for k in dict.fromkeys(r["kind"] for r in rows):  # a table per kind; names whole, the summary takes what is left
        summary_w = max(10, console.width - name_w - plugin_w - 8)
        table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False, width=name_w + summary_w + plugin_w + 6)
        table.add_column("name", no_wrap=True, min_width=name_w + 2, max_width=name_w + 2)
        table.add_column("summary", no_wrap=not long, overflow="fold" if long else "ellipsis", min_width=summary_w, max_width=summary_w)
        table.add_column("plugin", no_wrap=True, min_width=plugin_w, max_width=plugin_w, style="dim")
        for r in (r for r in rows if r["kind"] == k):  # plugin text as written: "[check]" is not rich markup
            summary = r["summary"] + (f" ({r['stage']})" if "stage" in r else "")
            table.add_row(Text("  " + r["name"]), Text(summary), Text(r["plugin"]))
        console.print(Text(k, style="bold"))
        console.print(table)


@components.command("show", short_help="One component's options: type, default, description.")
@click.argument("kind")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def components_show(kind: str, name: str, as_json: bool) -> None:
    """Show one component and each of its options: its type (the allowed values where there are
    few), its default and what it does.

    \b
    Example: unstable components show learner reinforce
    """
    system = plugin_system()
    spec = system.get(kind, name)
    rec = system.provider_of(kind, name)
    rows = _option_rows(spec)
    if as_json:
        print_json({"kind": kind, "name": name, "summary": spec.summary, "plugin": rec.name, "package": rec.package,
                    "version": rec.version, "options": rows})
        return
    from rich.padding import Padding
    from rich.text import Text

    console = rich_console()
    console.print(Text.assemble((f"{kind}:{name}", "bold"), f" - {spec.summary}\nfrom plugin {rec.name} ({rec.package} {rec.version})"))
    if not rows:
        console.print("no options")
        return
    for r in rows:  # an option a block: the name, type and default, then the description indented
        default = "(required)" if r["required"] else f"= {r['default']!r}"
        console.print(Text.assemble("\n", (r["name"], "bold cyan"), f": {r['type']} {default}"))
        if r["description"]:
            console.print(Padding(Text(r["description"]), (0, 0, 0, 4)))


# -- envs -----------------------------------------------------------------------------------------


@click.group()
def envs() -> None:
    """Environments."""


@envs.command("list", short_help="Env ids that work offline here.")
@click.option("--provider", default=None, help="Only this env provider's ids (default: every provider's).")
def envs_list(provider: str | None) -> None:
    """List environment ids known to work offline here: the default provider's (textarena) as
    they are, another provider's as PROVIDER/GAME, the form a config names them by.

    \b
    Example: unstable envs list --provider openspiel
    """
    from .runtime.building import build_component

    system = plugin_system()
    names = [provider] if provider is not None else system.names("env")
    for name in names:
        env = build_component("env", name, plugins=system)
        prefix = "" if name == "textarena" else f"{name}/"
        for env_id in env.known_env_ids():
            click.echo(env_id if env_id.startswith(prefix) else prefix + env_id)
