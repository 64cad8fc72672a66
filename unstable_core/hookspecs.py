"""Every hook of unstable. Plugins implement any subset with ``@unstable_core.hookimpl``.

Registration hooks return lists of typed spec records (see ``unstable_core.components``); the
catalog validates them and names the plugin on any error. Lifecycle hooks take one pydantic
context object (``unstable_core.types``) whose fields may grow in later versions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    import click

    from .components import (
        BufferSpec,
        EnvProviderSpec,
        EnvSamplerSpec,
        ExecutorSpec,
        InferenceSpec,
        LearnerSpec,
        ModelSamplerSpec,
        RaterSpec,
        RewardTransformSpec,
        TemplateSpec,
        TrackerSpec,
    )
    from .types import (
        BatchEndContext,
        CheckpointContext,
        GameEndContext,
        RunEndContext,
        RunStartContext,
        ValidationEndContext,
        ValidationStartContext,
    )

hookspec = pluggy.HookspecMarker("unstable")

# --------------------------------------------------------------------------------------------
# Registration hooks: called once when the catalog is built (`unstable plugins list`, a run).
# --------------------------------------------------------------------------------------------


@hookspec
def unstable_envs() -> list[EnvProviderSpec]:
    """Register env providers: game libraries that make environments by id.

    Called once when the catalog is collected. Return a list of ``EnvProviderSpec``; the
    factory's product satisfies ``components.EnvProvider``.

    Example::

        @hookimpl
        def unstable_envs():
            return [EnvProviderSpec(name="my-games", summary="My games", factory=lambda o, ctx: MyProvider())]
    """


@hookspec
def unstable_env_samplers() -> list[EnvSamplerSpec]:
    """Register env samplers: which environment the next training game uses.

    Called once when the catalog is collected. The product satisfies ``components.EnvSampler``.

    Example::

        @hookimpl
        def unstable_env_samplers():
            return [EnvSamplerSpec(name="first", summary="Always the first env",
                                   factory=lambda o, ctx: FirstEnv())]
    """


@hookspec
def unstable_model_samplers() -> list[ModelSamplerSpec]:
    """Register model samplers: which opponents sit at the table.

    Called once when the catalog is collected. The product satisfies ``components.ModelSampler``.

    Example::

        @hookimpl
        def unstable_model_samplers():
            return [ModelSamplerSpec(name="self", summary="Mirror", factory=lambda o, ctx: Mirror())]
    """


@hookspec
def unstable_raters() -> list[RaterSpec]:
    """Register raters: how a finished game changes ratings in the model registry.

    Called once when the catalog is collected. The product satisfies ``components.Rater``.

    Example::

        @hookimpl
        def unstable_raters():
            return [RaterSpec(name="elo", summary="Elo ratings", config=EloOptions, factory=make_elo)]
    """


@hookspec
def unstable_reward_transforms() -> list[RewardTransformSpec]:
    """Register reward transforms; each record names its ``stage``: 'final' (game rewards),
    'step' (one step) or 'sampling' (a drawn batch).

    Called once when the catalog is collected; a run composes them in config order.

    Example::

        @hookimpl
        def unstable_reward_transforms():
            return [RewardTransformSpec(name="clip", stage="step", summary="Clip to [-1, 1]",
                                        factory=lambda o, ctx: clip_step)]
    """


@hookspec
def unstable_buffers() -> list[BufferSpec]:
    """Register buffers: how samples are stored and drawn.

    Called once when the catalog is collected. The product satisfies ``components.Buffer``.

    Example::

        @hookimpl
        def unstable_buffers():
            return [BufferSpec(name="fifo", summary="First in, first out", factory=make_fifo)]
    """


@hookspec
def unstable_learners() -> list[LearnerSpec]:
    """Register learners: how a batch updates the policy.

    Called once when the catalog is collected. The product satisfies ``components.Learner``.

    Example::

        @hookimpl
        def unstable_learners():
            return [LearnerSpec(name="reinforce", summary="REINFORCE", config=Options, factory=make)]
    """


@hookspec
def unstable_inference_backends() -> list[InferenceSpec]:
    """Register inference backends: how a model ref turns prompts into completions.

    Called once when the catalog is collected. The product satisfies ``components.Inference``.

    Example::

        @hookimpl
        def unstable_inference_backends():
            return [InferenceSpec(name="echo", summary="Echo the prompt", factory=make_echo)]
    """


@hookspec
def unstable_executors() -> list[ExecutorSpec]:
    """Register executors: where the roles of a run are placed (placement only).

    Called once when the catalog is collected. The product satisfies ``components.Executor``.

    Example::

        @hookimpl
        def unstable_executors():
            return [ExecutorSpec(name="local", summary="One process", factory=make_local)]
    """


@hookspec
def unstable_trackers() -> list[TrackerSpec]:
    """Register trackers: where metrics go.

    Called once when the catalog is collected. The product satisfies ``components.Tracker``.

    Example::

        @hookimpl
        def unstable_trackers():
            return [TrackerSpec(name="stdout", summary="Print records", factory=make_stdout)]
    """


@hookspec
def unstable_templates() -> list[TemplateSpec]:
    """Register templates: prompt rendering plus action extraction.

    Called once when the catalog is collected. The product satisfies ``components.Template``.

    Example::

        @hookimpl
        def unstable_templates():
            return [TemplateSpec(name="plain", summary="Observation as is", factory=make_plain)]
    """


# --------------------------------------------------------------------------------------------
# Lifecycle hooks: called by the running loop. Return values are ignored unless stated.
# --------------------------------------------------------------------------------------------


@hookspec
def unstable_run_start(ctx: RunStartContext) -> None:
    """Called once after every component is built and the run directory is written, before the
    first game. ``ctx.config`` is the resolved config, ``ctx.plugins`` the plugin records.

    Example::

        @hookimpl
        def unstable_run_start(ctx):
            print("starting", ctx.run_dir)
    """


@hookspec
def unstable_run_end(ctx: RunEndContext) -> None:
    """Called once when the run stops: completed, interrupted (Ctrl-C) or failed, after every
    file is flushed. ``ctx.status`` says which.

    Example::

        @hookimpl
        def unstable_run_end(ctx):
            notify(f"run {ctx.run_dir} {ctx.status} after {ctx.learner_steps} steps")
    """


@hookspec
def unstable_game_end(ctx: GameEndContext) -> None:
    """Called after every game (training, evaluation, tournament; finished or failed) once the
    rater and the buffer have seen it. ``ctx.result`` is the ``GameResult``.

    Example::

        @hookimpl
        def unstable_game_end(ctx):
            if ctx.result.outcome == "failed":
                print(ctx.result.error)
    """


@hookspec
def unstable_batch_end(ctx: BatchEndContext) -> None:
    """Called after every learner update with the update's metrics.

    Example::

        @hookimpl
        def unstable_batch_end(ctx):
            if ctx.metrics.get("grad_norm", 0) > 100:
                print("exploding gradients at", ctx.learner_step)
    """


@hookspec
def unstable_checkpoint_saved(ctx: CheckpointContext) -> None:
    """Called after a checkpoint is written, registered and loaded by inference.

    Example::

        @hookimpl
        def unstable_checkpoint_saved(ctx):
            upload(ctx.checkpoint.path)
    """


@hookspec
def unstable_validation_start(ctx: ValidationStartContext) -> bool | None:
    """Called before each evaluation round. Return False to skip that round (any plugin
    returning False vetoes it); None or True lets it run. Any other value (``"no"``, ``0``)
    stops the run with an error naming the plugin.

    Example::

        @hookimpl
        def unstable_validation_start(ctx):
            return ctx.learner_step % 10 == 0   # evaluate every tenth round only
    """


@hookspec
def unstable_validation_end(ctx: ValidationEndContext) -> None:
    """Called after each evaluation round with one record per (env, opponent): ``games``,
    ``win_rate``, ``draw_rate``, ``loss_rate``, ``invalid_rate``.

    Example::

        @hookimpl
        def unstable_validation_end(ctx):
            best = max(r["win_rate"] for r in ctx.records)
    """


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


@hookspec
def unstable_register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``unstable`` command line. Called when the CLI starts; ``cli`` is
    the root ``click.Group``. Keep imports inside the command bodies so ``unstable --help``
    stays fast.

    Example::

        @hookimpl
        def unstable_register_commands(cli):
            @cli.command()
            def hello():
                "Say hello."
                click.echo("hello")
    """


def all_hook_names() -> list[str]:
    """Names of every hook spec in this module."""
    return sorted(name for name, obj in globals().items() if name.startswith("unstable_") and callable(obj))


__all__ = ["hookspec", "all_hook_names"]
