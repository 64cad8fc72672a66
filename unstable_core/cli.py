"""The ``unstable`` command line (click; output with rich).

Every error caused by input prints one clear message and exits with status 2; no traceback.
Plugins add subcommands through ``unstable_register_commands``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from . import __version__
from .cli_catalog import components, envs, plugin_system, plugins, print_json, rich_console
from .errors import UnstableError, describe_error
from .interrupts import install_early_handlers, restore


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


@cli.command(short_help="Train, play a tournament, or resume a run.")
@click.argument("config", type=click.Path(dir_okay=False), required=False)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None, help="Run directory (default runs/NAME-TIME).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None, metavar="RUN_DIR",
              help="Go on from RUN_DIR's latest snapshot, with its config (--set may only raise training.learning_steps).")
@click.option("--repair", is_flag=True, help="With --resume: go on with a metrics log that was cut, deleted or edited "
              "within what the snapshot covers (its complete lines are kept), a damaged state/latest (the newest snapshot that "
              "reads), registry.json or config.json's components (rewritten) instead of refusing it; the resume record says what.")
def run(config: str | None, overrides: tuple[str, ...], run_dir: str | None, resume_dir: str | None, repair: bool) -> None:
    """Run a config: train, or without a learner play a tournament; or resume a run.

    \b
    Example: unstable run examples/kuhn-tiny.toml --set training.learning_steps=20
             unstable run --resume runs/kuhn-tiny-20261126-101500
    """
    from .api import build
    from .errors import ConfigError, RunInterrupted

    if resume_dir is not None:
        if run_dir is not None and run_dir != resume_dir:
            raise ConfigError("--resume RUN_DIR goes on in RUN_DIR: leave out --run-dir")
        job = build(config, run_dir=resume_dir, overrides=overrides, plugins=plugin_system(), resume=True, repair=repair)
    elif repair:
        raise ConfigError("--repair goes with --resume RUN_DIR")
    elif config is None:
        raise ConfigError("give a config to run, or --resume RUN_DIR")
    else:
        job = build(config, run_dir=run_dir, overrides=overrides, plugins=plugin_system())
    click.echo(f"run directory: {job.run_dir}", err=True)
    from .config_check import config_warnings

    for line in config_warnings(job.plan.config):
        click.echo(f"warning: {line}", err=True)
    try:
        result = job.start()
    except RunInterrupted as exc:
        click.echo(f"{exc}; everything so far is in {job.run_dir}", err=True)
        if job.plan.trains:
            click.echo(_resume_hint(job.run_dir), err=True)
        sys.exit(exc.exit_code)
    from .dashboard.present import wrote_end

    shown = wrote_end(sys.stderr)  # off a terminal the console tracker wrote each evaluation and the end there
    if not (shown and _same_stream(sys.stdout, sys.stderr)):
        print_results(result.eval_records)
    if not shown:
        click.echo(f"{result.status}: {result.games_played} games, {result.learner_steps} learner steps -> {job.run_dir}", err=True)


def _same_stream(a: Any, b: Any) -> bool:
    """Whether two streams write to the same file or pipe (``2>&1``)."""
    import os

    try:
        x, y = os.fstat(a.fileno()), os.fstat(b.fileno())
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError and a ValueError
        return a is b
    return (x.st_dev, x.st_ino) == (y.st_dev, y.st_ino)


def _resume_hint(run_dir: str) -> str:
    """The command that goes on with an interrupted training run, and from which snapshot."""
    import shlex

    from .runtime.rundir.store import latest_step

    step = latest_step(run_dir)
    where = f"from the snapshot of step {step}" if step is not None else "no snapshot yet: it starts over from its config.json"
    return f"go on with: unstable run --resume {shlex.quote(str(run_dir))}  ({where})"


def print_results(records: list[Any]) -> None:
    """The last evaluation: a table on a terminal, else whole lines (nothing cut or wrapped); the
    model's mean return (chips for poker) and, where the run computed it, its exploitability."""
    from rich.table import Table

    if not records:
        return
    last = max(r.step for r in records)
    console = rich_console()
    if not console.is_terminal:
        from .dashboard.lines import eval_line

        for r in records:
            if r.step == last:
                click.echo(eval_line(r.model_dump()))
        return
    shown = [r for r in records if r.step == last]
    exploit = any("exploitability" in r.policy for r in shown)  # where the run computed it (eval_policy_metrics)
    t = Table(title=f"evaluation (step {last})")
    for col in ("env", "model", "opponent", "games", "win", "draw", "loss", "invalid", "return",
                *(["exploitability"] if exploit else [])):
        t.add_column(col, no_wrap=col not in ("env", "model", "opponent"))
    for r in shown:
        t.add_row(r.env_id, r.model, r.opponent, str(r.games),
                  *(f"{v:.2f}" for v in (r.win_rate, r.draw_rate, r.loss_rate, r.invalid_rate)),
                  "-" if r.mean_return is None else f"{r.mean_return:+.2f}",
                  *([f"{r.policy['exploitability']:.4f}" if "exploitability" in r.policy else "-"] if exploit else []))
    console.print(t)


# -- config ---------------------------------------------------------------------------------------


@cli.group("config")
def config_group() -> None:
    """Run configs."""


@config_group.command("schema", short_help="JSON Schema of the run config, plugins included.")
def config_schema() -> None:
    """Print the JSON Schema of the run config, every plugin's options included.

    \b
    Example: unstable config schema > unstable.schema.json
    """
    from .config_schema import config_json_schema

    print_json(config_json_schema(plugin_system()))


@config_group.command("check", short_help="Validate a config and every plugin option.")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key (repeatable).")
def config_check(file: str, overrides: tuple[str, ...]) -> None:
    """Validate a config and every chosen component's options, and build the cheap components
    (samplers, rater, buffer, reward transforms); exit 2 on any problem.

    \b
    Example: unstable config check examples/kuhn-tiny.toml --set learner.lr=1e-3
    """
    from .config import load_config
    from .config_check import config_warnings, factory_problems, summarize
    from .errors import ConfigError
    from .runtime.plan import make_plan

    cfg = load_config(file, overrides)
    system = plugin_system()
    plan = make_plan(cfg, system, "", file)  # checks the config once
    for line in config_warnings(cfg):
        click.echo(f"warning: {line}", err=True)
    problems = factory_problems(plan, system)
    if problems:
        raise ConfigError(summarize(problems))
    chosen = {key: recipe.name for key, recipe in plan.recipes.items() if not key.startswith("backends.")}
    click.echo(f"{file}: ok ({len(chosen)} components: " + ", ".join(f"{k}={name}" for k, name in chosen.items()) + ")")


def finite(value: float, name: str) -> float:
    """``value``, or a usage error when it is NaN (which passes every range check)."""
    if value != value:
        raise click.BadParameter("nan is not a number of seconds", param_hint=name)
    return value


# -- plot -----------------------------------------------------------------------------------------


@cli.command(short_help="Learning curves of one or more runs, as a PNG.")
@click.argument("run_dirs", metavar="RUN_DIR [RUN_DIR ...]", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="PNG to write (default RUN_DIR/curve.png for one run, ./curve.png for several).")
@click.option("--ceiling", type=click.FloatRange(0, 1), default=None,
              help="Draw the best known win rate (e.g. 0.77 on KuhnPoker, see docs/learning.md).")
@click.option("--reference", "references", multiple=True, metavar="NAME=VALUE",
              help="A reference line on the exploitability panel, e.g. uniform=0.4583 (repeatable).")
@click.option("--group-by", "group_by", default=None, metavar="KEY",
              help="Average the runs within each value of this config key only, e.g. model_sampler.name "
              "(one curve and band per sampler); several keys comma-separated.")
def plot(run_dirs: tuple[str, ...], out: str | None, ceiling: float | None, references: tuple[str, ...],
         group_by: str | None) -> None:
    """Plot evaluation curves (win and invalid-move rates per env and opponent, exploitability
    where evaluations have it) and training loss; several runs (seeds) on one figure as their
    mean and range.

    \b
    Example: unstable plot runs/seed0 runs/seed1 runs/seed2 --ceiling 0.771 --out curve.png
             unstable plot runs/samplers/* --group-by model_sampler.name
    """
    from .plotting import plot_runs

    lines: dict[str, float] = {}
    for item in references:
        name, eq, value = item.partition("=")
        try:
            lines[name] = float(value)
        except ValueError:
            raise click.BadParameter(f"{item!r}: expected NAME=NUMBER", param_hint="--reference") from None
        if not eq or not name:
            raise click.BadParameter(f"{item!r}: expected NAME=NUMBER", param_hint="--reference")
    path = plot_runs(list(run_dirs), out, ceiling, lines, warn=lambda text: click.echo(f"warning: {text}", err=True),
                     group_by=group_by)
    click.echo(f"plot written to {path}")


# -- watch ----------------------------------------------------------------------------------------


@cli.command(short_help="The live dashboard of a run going on elsewhere.")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--refresh", "refresh_s", type=click.FloatRange(min=0.05, max=3600), default=1.0, show_default=True,
              callback=lambda ctx, param, value: finite(value, "--refresh"), help="Seconds between reads of the run directory.")
@click.option("--once", is_flag=True, help="Show the dashboard as it stands and exit.")
@click.option("--plain", is_flag=True, help="Plain lines even on a terminal.")
def watch(run_dir: str, refresh_s: float, once: bool, plain: bool) -> None:
    """Follow a run in progress elsewhere (another terminal, a cluster's driver) from its run
    directory: the console tracker's dashboard, refreshed until the run ends.

    \b
    Example: unstable watch runs/kuhn-tiny-20261126-101500 --refresh 2
    """
    import signal

    from .dashboard.watch import watch as follow

    # Ctrl-C is how one leaves it: a KeyboardInterrupt, so that the live display puts the terminal back
    signal.signal(signal.SIGINT, signal.default_int_handler)
    status = follow(run_dir, refresh_s=refresh_s, once=once, live=False if plain else None)
    if status == "failed":
        sys.exit(1)


for _group in (plugins, components, envs):  # cli_catalog.py
    cli.add_command(_group)


# -- plugin commands --------------------------------------------------------------------------------


def _register_plugin_commands() -> None:
    system = plugin_system()
    for impl in system.pm.hook.unstable_register_commands.get_hookimpls():
        try:
            system.call_impl("unstable_register_commands", impl, cli=cli)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            system.fail(impl.plugin_name, exc, "hook unstable_register_commands raised")


def describe_os_error(exc: OSError) -> str:
    """``PATH: reason`` (a path longer than 120 characters shortened in the middle)."""
    name = "" if exc.filename is None else str(exc.filename)
    if len(name) > 120:
        name = f"{name[:60]}...{name[-57:]}"
    reason = exc.strerror or describe_error(exc)
    return f"{name}: {reason}" if name else reason


def main(argv: list[str] | None = None) -> None:
    previous = install_early_handlers()  # the console script did it already (entry.py); this is for main() called otherwise
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
    except OSError as exc:  # a path the command cannot read or write (missing, unwritable, too long)
        click.echo(f"error: {describe_os_error(exc)}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    finally:
        restore(previous)


if __name__ == "__main__":  # pragma: no cover
    main()
