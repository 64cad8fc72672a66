"""Hook implementations of unstable-openspiel. Nothing heavy is imported here: OpenSpiel loads
when a game is made or checked."""

from __future__ import annotations

from typing import Any

from unstable_core import EnvProviderSpec, InferenceSpec, hookimpl

from .agents import AgentModelOptions, AgentOptions, OpenSpielAgents, check_spec
from .env import OpenSpielOptions, OpenSpielProvider, check_env
from .least_exploitable import check_env_solvable

NEAR_ALL_INVALID = 0.9  # `unstable exploitability` warns at this mean invalid mass


@hookimpl
def unstable_envs() -> list[EnvProviderSpec]:
    return [EnvProviderSpec(name="openspiel", summary="OpenSpiel's two-player games by name (kuhn_poker, leduc_poker, ...)",
                            config=OpenSpielOptions, factory=lambda o, ctx: OpenSpielProvider(o), check_env=check_env,
                            policy_metrics=True, legal_actions=True, check_least_exploitable=check_env_solvable)]


@hookimpl
def unstable_inference_backends() -> list[InferenceSpec]:
    return [InferenceSpec(name="openspiel", summary="OpenSpiel opponents: uniform, cfr[:N], best-response:SPEC",
                          config=AgentOptions, factory=lambda o, ctx: OpenSpielAgents(o), check_model=check_spec,
                          model_options=AgentModelOptions, serves_checkpoints=False, answers_at_once=True,
                          scores_completions=True)]


@hookimpl
def unstable_register_commands(cli: Any) -> None:
    import click

    @cli.command(short_help="Exploitability (NashConv) of a policy on an OpenSpiel game.")
    @click.argument("spec")
    @click.option("--env", "env_id", default=None, help="An OpenSpiel game, e.g. openspiel/kuhn_poker (default with a run "
                  "directory: the game the run played).")
    @click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="A game parameter (repeatable).")
    @click.option("--template", default=None, help="Template that renders the prompts (default: a run's env template; "
                  "qwen3-zs for tiny models; else default).")
    @click.option("--checkpoint", default=None, help="With a run directory: this checkpoint (default: the latest); with "
                  "--mixture uniform or least, the population up to this checkpoint.")
    @click.option("--temperature", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
                  help="With a model given by name: its sampling temperature.")
    @click.option("--top-p", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True),
                  help="With a model given by name: its nucleus sampling threshold.")
    @click.option("--max-info-states", default=100_000, show_default=True, type=click.IntRange(min=1),
                  help="Refuse games with more information states.")
    @click.option("--mixture", type=click.Choice(["uniform", "meta", "least"]), default=None,
                  help="With a run directory: the population's policy, the uniform mixture of every checkpoint "
                  "(fictitious play's output) or the PSRO meta mixture, instead of one checkpoint; 'least': the "
                  "least exploitable mixture of every checkpoint (a floor for any meta-solver; two-player zero-sum games).")
    @click.option("--policy", "with_policy", is_flag=True,
                  help="Also print the extracted policy: each information state's actions and their probabilities.")
    @click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
    def exploitability(spec: str, env_id: str | None, params: tuple[str, ...], template: str | None, checkpoint: str | None,
                       temperature: float, top_p: float, max_info_states: int, mixture: str | None, with_policy: bool,
                       as_json: bool) -> None:
        """Exploitability of SPEC's exact policy on an OpenSpiel game, by OpenSpiel's own NashConv
        (0: a Nash equilibrium). SPEC: a run directory (its latest checkpoint; --env defaults to
        the game it played), a model (tiny:..., a local path), a scripted agent (random-valid, ...)
        or an openspiel agent (uniform, cfr, cfr:N, best-response:SPEC).

        \b
        Example: unstable exploitability random-valid --env openspiel/kuhn_poker --json
                 unstable exploitability runs/openspiel-kuhn-tiny-20261126-101500
        """
        from unstable_core import UnstableError

        from .exploit import exploitability as compute
        from .exploit import mixture_exploitability, run_game, run_games

        if env_id is None:
            env_id = run_game(spec)
        elif (played := run_games(spec)) and env_id not in played:
            click.echo(f"warning: --env {env_id} is not the game {spec} played ({', '.join(played)}): its models never "
                       "saw this game's observations", err=True)

        parsed: dict[str, Any] = {}
        for item in params:
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise UnstableError(f"--param {item!r}: expected KEY=VALUE")
            parsed[key] = int(value) if value.lstrip("-").isdigit() else value
        if mixture is not None:
            if with_policy:
                raise UnstableError("--policy shows one policy's table: not with --mixture")
            mixed = mixture_exploitability(spec, env_id, mixture, parsed, max_info_states, upto=checkpoint)
            if as_json:
                click.echo(mixed.model_dump_json(indent=2))
            else:
                kept = f" ({len(mixed.members)} of weight > 0)" if len(mixed.members) < mixed.population else ""
                click.echo(f"{mixed.mixture} mixture of {mixed.population} models{kept} of {mixed.run_dir} on {mixed.env}: "
                           f"exploitability {mixed.exploitability:.4f} (NashConv {mixed.nash_conv:.4f}), {mixed.seconds:.1f} s")
                if mixed.mixture == "least":  # a handful of members: which ones, with their weights
                    click.echo("  " + "  ".join(f"{uid} {w:.3f}" for uid, w in mixed.members.items()))
            return
        report = compute(spec, env_id, parsed, template, max_info_states, checkpoint=checkpoint,
                         sampling={"temperature": temperature, "top_p": top_p}, with_policy=with_policy)
        if as_json:
            click.echo(report.model_dump_json(indent=2, exclude_none=True))
            return
        if report.invalid_mass_mean >= NEAR_ALL_INVALID:
            click.echo(f"warning: {report.spec} puts {report.invalid_mass_mean:.0%} of its probability on invalid answers (mean "
                       "over information states): the figures are of what is left, renormalised over the legal moves "
                       "(uniform where nothing is left), not of how it plays, where an invalid answer loses", err=True)
        measured = f" ({report.checkpoint})" if report.checkpoint else ""
        click.echo(f"{report.spec}{measured} on {report.env}: exploitability {report.exploitability:.4f} (NashConv "
                   f"{report.nash_conv:.4f}), invalid mass max {report.invalid_mass:.4f}, {report.info_states} "
                   f"information states, {report.seconds:.1f} s")
        width = max((len(key) for key in report.policy or {}), default=0)
        for key, row in (report.policy or {}).items():
            click.echo(f"  {key:<{width}}  " + "  ".join(f"{label} {p:.3f}" for label, p in row.items()))
