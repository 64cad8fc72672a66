"""Hook implementations of unstable-vllm. Nothing heavy is imported here: vLLM, torch and
transformers load when an engine starts."""

from __future__ import annotations

from typing import Any

from unstable_core import BuildContext, ChosenComponents, InferenceSpec, ModelRef, hookimpl

from .options import VLLMInferenceOptions, VLLMModelOptions, smallest_rank_at_least


def make_inference(options: VLLMInferenceOptions, ctx: BuildContext) -> Any:
    from .inference import VLLMInference

    backend = VLLMInference(options)
    if ctx.model is not None and ctx.model.backend == "vllm":
        backend.prepare(ctx.model)  # the trained model's engine starts with the run: a failure stops it before any game
    return backend


def check_model(ref: ModelRef) -> None:
    if not ref.model:
        raise ValueError("the vllm backend needs `model` (a hub id, a local path or 'tiny...')")


def check_run(options: VLLMInferenceOptions, components: ChosenComponents) -> None:
    """The adapter the learner declares (``LearnerSpec.adapter``) must fit in vLLM's adapter
    slots (``max_lora_rank``) and hold LoRA weights only (vLLM loads no ``modules_to_save``);
    a colocated run's memory split must leave the learner room (``colocation.py``)."""
    if components.colocate:
        from .colocation import check_colocated

        check_colocated(options, components)
    adapter = components.adapter
    if adapter is None:
        return
    if adapter.modules_to_save:
        raise ValueError(f"vLLM serves LoRA weights only, not the learner's lora.modules_to_save {adapter.modules_to_save}: "
                         "leave it empty, or use inference name = 'hf'")
    if options.enable_lora and adapter.rank > options.max_lora_rank:
        fit = smallest_rank_at_least(adapter.rank)
        hint = f"set inference.max_lora_rank = {fit}" if fit else "vLLM serves no adapter of that rank"
        raise ValueError(f"max_lora_rank = {options.max_lora_rank} cannot hold the learner's LoRA rank {adapter.rank}: {hint}")


@hookimpl
def unstable_inference_backends() -> list[InferenceSpec]:
    return [
        InferenceSpec(
            name="vllm",
            summary="vLLM's async engine: continuous batching, LoRA hot-swap, token ids and sampled-token logprobs",
            config=VLLMInferenceOptions,
            factory=make_inference,
            check_model=check_model,
            check_run=check_run,
            model_options=VLLMModelOptions,
            releases_memory=True,  # sleep mode where the platform has it; elsewhere one message, and the memory stays
        )
    ]
