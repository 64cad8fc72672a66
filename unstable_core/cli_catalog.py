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


@plugins.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include the core's built-in plugins.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of plugin objects.")
def plugins_list(show_all: bool, as_json: bool) -> None:
    """List plugins: name, package, version, status, components, hooks. Always exits 0."""
    records = [r for r in plugin_system().plugin_records() if show_all or not r.builtin]
    if as_json:
        print_json([r.as_dict() for r in records])
        return
    from rich.table import Table
    from rich.text import Text

    if not records:
        click.echo("No plugins installed (use --all to include the built-ins).")
        return
    table = Table(title="unstable plugins")
    for col in ("Name", "Package", "Version", "Status", "Components", "Hooks"):
        table.add_column(col, overflow="fold")
    colour = {"active": "green", "disabled": "yellow", "error": "red"}
    for r in records:
        status = f"[{colour[r.status]}]{r.status}[/]"
        comps = Text(", ".join(r.components)) if r.status != "error" else Text(r.error or "", style="red")
        hooks = ", ".join(h for h in r.hooks if h.startswith("unstable_"))
        table.add_row(*map(Text, (r.name, r.package, r.version)), status, comps, hooks)
    rich_console().print(table)


# -- components -----------------------------------------------------------------------------------


@click.group()
def components() -> None:
    """Components offered by the loaded plugins."""


def _option_rows(spec: Any) -> list[dict[str, Any]]:
    from pydantic_core import PydanticUndefined

    rows = []
    for name, f in spec.config.model_fields.items():
        ann = f.annotation
        typ = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
        default = None if f.default is PydanticUndefined and f.default_factory is None else (
            f.default_factory() if f.default_factory is not None else f.default
        )
        rows.append({"name": name, "type": typ, "default": default, "required": f.is_required(), "description": f.description or ""})
    return rows


@components.command("list")
@click.option("--kind", default=None, help="Only this kind (env, learner, model_sampler, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def components_list(kind: str | None, as_json: bool) -> None:
    """List components: kind, name, summary, plugin."""
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

    table = Table(title="unstable components")
    for col in ("Kind", "Name", "Summary", "Plugin"):
        table.add_column(col, overflow="fold")
    for r in rows:  # plugin text is printed as written: "[check]" or "list[str]" is not rich markup
        summary = r["summary"] + (f" ({r['stage']})" if "stage" in r else "")
        table.add_row(*map(Text, (r["kind"], r["name"], summary, r["plugin"])))
    rich_console().print(table)


@components.command("show")
@click.argument("kind")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def components_show(kind: str, name: str, as_json: bool) -> None:
    """Show one component and each of its options (type, default, description)."""
    system = plugin_system()
    spec = system.get(kind, name)
    rec = system.provider_of(kind, name)
    rows = _option_rows(spec)
    if as_json:
        print_json({"kind": kind, "name": name, "summary": spec.summary, "plugin": rec.name, "package": rec.package,
                     "version": rec.version, "options": rows})
        return
    from rich.table import Table
    from rich.text import Text

    console = rich_console()
    console.print(Text.assemble((f"{kind}:{name}", "bold"), f" - {spec.summary}\nfrom plugin {rec.name} ({rec.package} {rec.version})"))
    if not rows:
        console.print("no options")
        return
    table = Table()
    for col in ("Option", "Type", "Default", "Description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        default = "(required)" if r["required"] else repr(r["default"])
        table.add_row(*map(Text, (r["name"], r["type"], default, r["description"])))
    console.print(table)


# -- envs -----------------------------------------------------------------------------------------


@click.group()
def envs() -> None:
    """Environments."""


@envs.command("list")
@click.option("--provider", default=None, help="Only this env provider's ids (default: every provider's).")
def envs_list(provider: str | None) -> None:
    """List environment ids known to work offline here: the default provider's (textarena) as
    they are, another provider's as PROVIDER/GAME, the form a config names them by."""
    from .runtime.building import build_component

    system = plugin_system()
    names = [provider] if provider is not None else system.names("env")
    for name in names:
        env = build_component("env", name, plugins=system)
        prefix = "" if name == "textarena" else f"{name}/"
        for env_id in env.known_env_ids():
            click.echo(env_id if env_id.startswith(prefix) else prefix + env_id)
