"""The ``unstable`` command line (click; output with rich).

Every error caused by input prints one clear message and exits with status 2; no traceback.
Plugins add subcommands through ``unstable_register_commands``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from . import __version__
from .errors import UnstableError


def _system() -> Any:
    from .plugins import get_plugin_system

    return get_plugin_system()


def _console() -> Any:
    from rich.console import Console

    return Console()


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="unstable")
@click.option("-v", "--verbose", is_flag=True, help="Show third-party output too (transformers' progress bars and warnings).")
def cli(verbose: bool) -> None:
    """unstable: online RL of language models by self-play on text games."""
    if verbose:
        import os

        from .progress import VERBOSE_ENV

        os.environ[VERBOSE_ENV] = "1"  # children (role workers) inherit it


# -- run ----------------------------------------------------------------------------------------


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False), required=False)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, help="Run directory (default runs/NAME-TIME).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None, metavar="RUN_DIR",
              help="Go on from RUN_DIR's latest snapshot, with its config (--set may only raise training.learning_steps).")
def run(config: str | None, overrides: tuple[str, ...], run_dir: str | None, resume_dir: str | None) -> None:
    """Run a config: train, or without a learner play a tournament; or resume a run."""
    from .api import build
    from .errors import ConfigError, RunInterrupted

    if resume_dir is not None:
        if run_dir is not None and run_dir != resume_dir:
            raise ConfigError("--resume RUN_DIR goes on in RUN_DIR: leave out --run-dir")
        job = build(config, run_dir=resume_dir, overrides=overrides, plugins=_system(), resume=True)
    elif config is None:
        raise ConfigError("give a config to run, or --resume RUN_DIR")
    else:
        job = build(config, run_dir=run_dir, overrides=overrides, plugins=_system())
    click.echo(f"run directory: {job.run_dir}", err=True)
    try:
        result = job.start()
    except RunInterrupted as exc:
        click.echo(f"{exc}; everything so far is in {job.run_dir}", err=True)
        sys.exit(exc.exit_code)
    _print_results(result.eval_records)
    click.echo(f"{result.status}: {result.games_played} games, {result.learner_steps} learner steps -> {job.run_dir}", err=True)


def _print_results(records: list[Any]) -> None:
    """The last evaluation: a table on a terminal, else whole lines (nothing cut or wrapped)."""
    from rich.table import Table

    if not records:
        return
    last = max(r.step for r in records)
    console = _console()
    if not console.is_terminal:
        from .dashboard.lines import eval_line

        for r in records:
            if r.step == last:
                click.echo(eval_line(r.model_dump()))
        return
    t = Table(title=f"evaluation (step {last})")
    for col in ("env", "model", "opponent", "games", "win", "draw", "loss", "invalid"):
        t.add_column(col)
    for r in records:
        if r.step == last:
            t.add_row(r.env_id, r.model, r.opponent, str(r.games),
                      *(f"{v:.2f}" for v in (r.win_rate, r.draw_rate, r.loss_rate, r.invalid_rate)))
    console.print(t)


# -- plugins --------------------------------------------------------------------------------------


@cli.group()
def plugins() -> None:
    """Installed plugins."""


@plugins.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include the core's built-in plugins.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of plugin objects.")
def plugins_list(show_all: bool, as_json: bool) -> None:
    """List plugins: name, package, version, status, components, hooks. Always exits 0."""
    records = [r for r in _system().plugin_records() if show_all or not r.builtin]
    if as_json:
        _print_json([r.as_dict() for r in records])
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
    _console().print(table)


# -- components -----------------------------------------------------------------------------------


@cli.group()
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
    system = _system()
    rows = [
        {"kind": k, "name": n, "summary": spec.summary, "plugin": rec.name, "package": rec.package,
         **({"stage": spec.stage} if hasattr(spec, "stage") else {})}
        for (k, n), (spec, rec) in sorted(system.catalog.items(), key=lambda kv: (list(KINDS).index(kv[0][0]), kv[0][1]))
        if kind is None or k == kind
    ]
    if as_json:
        _print_json(rows)
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="unstable components")
    for col in ("Kind", "Name", "Summary", "Plugin"):
        table.add_column(col, overflow="fold")
    for r in rows:  # plugin text is printed as written: "[check]" or "list[str]" is not rich markup
        summary = r["summary"] + (f" ({r['stage']})" if "stage" in r else "")
        table.add_row(*map(Text, (r["kind"], r["name"], summary, r["plugin"])))
    _console().print(table)


@components.command("show")
@click.argument("kind")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def components_show(kind: str, name: str, as_json: bool) -> None:
    """Show one component and each of its options (type, default, description)."""
    system = _system()
    spec = system.get(kind, name)
    rec = system.provider_of(kind, name)
    rows = _option_rows(spec)
    if as_json:
        _print_json({"kind": kind, "name": name, "summary": spec.summary, "plugin": rec.name, "package": rec.package,
                     "version": rec.version, "options": rows})
        return
    from rich.table import Table
    from rich.text import Text

    console = _console()
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


# -- config ---------------------------------------------------------------------------------------


@cli.group("config")
def config_group() -> None:
    """Run configs."""


@config_group.command("schema")
def config_schema() -> None:
    """Print the JSON Schema of the run config, every plugin's options included."""
    from .config_components import config_json_schema

    _print_json(config_json_schema(_system()))


@config_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
def config_check(file: str, overrides: tuple[str, ...]) -> None:
    """Validate a config and every chosen component's options; exit 2 on any problem."""
    from .config import load_config
    from .runtime.plan import check_run

    cfg = load_config(file, overrides)
    resolved = check_run(cfg, _system(), file)
    click.echo(f"{file}: ok ({len(resolved)} components: " + ", ".join(f"{k}={s.name}" for k, (s, _) in resolved.items()) + ")")


# -- plot -----------------------------------------------------------------------------------------


@cli.command()
@click.argument("run_dirs", metavar="RUN_DIR [RUN_DIR ...]", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="PNG to write (default RUN_DIR/curve.png for one run, ./curve.png for several).")
@click.option("--ceiling", type=click.FloatRange(0, 1), default=None,
              help="Draw the best known win rate (e.g. 0.77 on KuhnPoker, see docs/learning.md).")
def plot(run_dirs: tuple[str, ...], out: str | None, ceiling: float | None) -> None:
    """Plot evaluation curves (win and invalid-move rates per env and opponent) and training loss;
    several runs (seeds) on one figure as their mean and range."""
    from .plotting import plot_runs

    path = plot_runs(list(run_dirs), out, ceiling)
    click.echo(f"plot written to {path}")


# -- watch ----------------------------------------------------------------------------------------


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--refresh", "refresh_s", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between reads of the run directory.")
@click.option("--once", is_flag=True, help="Show the dashboard as it stands and exit.")
@click.option("--plain", is_flag=True, help="Plain lines even on a terminal.")
def watch(run_dir: str, refresh_s: float, once: bool, plain: bool) -> None:
    """Follow a run in progress elsewhere (another terminal, a cluster's driver) from its run
    directory: the console tracker's dashboard, refreshed until the run ends."""
    from .dashboard.watch import watch as follow

    status = follow(run_dir, refresh_s=refresh_s, once=once, live=False if plain else None)
    if status == "failed":
        sys.exit(1)


# -- envs -----------------------------------------------------------------------------------------


@cli.group()
def envs() -> None:
    """Environments."""


@envs.command("list")
@click.option("--provider", default="textarena", show_default=True, help="Env provider component.")
def envs_list(provider: str) -> None:
    """List environment ids known to work offline here."""
    from .runtime.plan import build_component

    env = build_component("env", provider, plugins=_system())
    for env_id in env.known_env_ids():
        click.echo(env_id)


# -- plugin commands --------------------------------------------------------------------------------


def _register_plugin_commands() -> None:
    system = _system()
    for impl in system.pm.hook.unstable_register_commands.get_hookimpls():
        try:
            system.call_impl("unstable_register_commands", impl, cli=cli)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            system.fail(impl.plugin_name, exc, "hook unstable_register_commands raised")


def main(argv: list[str] | None = None) -> None:
    try:
        _register_plugin_commands()
        cli.main(args=argv, prog_name="unstable", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code if exc.exit_code else 2)
    except UnstableError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
