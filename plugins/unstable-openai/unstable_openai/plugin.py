"""Registers the `openai` backend; the openai client is imported when a run builds it."""

from __future__ import annotations

from typing import Any

from unstable_core import BuildContext, InferenceSpec, ModelRef, hookimpl

from .options import OpenAIOptions


def make_inference(options: OpenAIOptions, ctx: BuildContext) -> Any:
    from .inference import OpenAIInference, read_api_key

    return OpenAIInference(options, read_api_key(options))


def check_model(ref: ModelRef) -> None:
    if not ref.model:
        raise ValueError("the openai backend needs `model`: the model's name at the API (e.g. google/gemini-2.0-flash-lite-001)")


@hookimpl
def unstable_inference_backends() -> list[InferenceSpec]:
    return [InferenceSpec(name="openai", summary="An OpenAI-compatible API (OpenRouter, OpenAI, vllm serve): opponents, evaluated models",
                          config=OpenAIOptions, factory=make_inference, check_model=check_model,
                          serves_checkpoints=False)]
