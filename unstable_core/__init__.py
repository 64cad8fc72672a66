"""unstable: a plugin framework for online RL of language models by self-play on text games.

Public names are imported lazily so that ``import unstable_core`` stays light: no torch, ray,
vllm, textarena or transformers, and pydantic only when a type is first used.
"""

from __future__ import annotations

from typing import Any

import pluggy

from .lazy import lazy_names

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("unstable")
"""Decorator for plugin hook implementations: ``@hookimpl def unstable_learners(): ...``."""

_LAZY = {
    # types
    **{n: "types" for n in (
        "EnvSpec", "ModelRef", "GameSpec", "Turn", "PlayerTrajectory", "GameResult", "Step", "Batch",
        "Checkpoint", "AdapterShape", "GenerationRequest", "Completion", "HookContext", "RunStartContext", "RunEndContext",
        "GameEndContext", "BatchEndContext", "CheckpointContext", "ValidationStartContext",
        "ValidationEndContext",
    )},
    # component records and protocols
    **{n: "components" for n in (
        "ComponentSpec", "EnvProviderSpec", "EnvSamplerSpec", "ModelSamplerSpec", "RaterSpec",
        "RewardTransformSpec", "BufferSpec", "LearnerSpec", "InferenceSpec", "ExecutorSpec", "TrackerSpec",
        "TemplateSpec", "Options", "NoOptions", "BuildContext", "ChosenComponents", "KINDS",
    )},
    **{n: "protocols" for n in (
        "GameEnv", "LegalActions", "EnvProvider", "EnvSampler", "ModelSampler", "Registry", "Rater", "Buffer", "Learner", "Inference",
        "Executor", "Tracker", "Template", "CompletionScorer", "MemoryReleaser", "PolicyMetrics", "MixtureMetrics",
        "ActionProbabilities", "PopulationMixture", "ExactPayoffs", "LeastExploitable", "LeastExploitableSampler",
        "FinalRewardTransform", "StepRewardTransform", "SamplingRewardTransform",
    )},
    **{n: "errors" for n in (
        "UnstableError", "ConfigError", "PluginError", "UnknownComponentError", "ComponentError", "RunFailed",
        "RunInterrupted",
    )},
    **{n: "plugins" for n in ("PluginSystem", "PluginRecord", "get_plugin_system")},
    **{n: "plugin_loading" for n in ("PluginRecipe", "load_plugins")},
    **{n: "config" for n in ("RunConfig", "load_config", "validate_config", "ComponentChoice", "env_provider_of")},
    "SECRET_ERROR": "config_loading",
    **{n: "records" for n in (
        "Record", "TrainRecord", "EvalRecord", "EvalSkippedRecord", "SummaryRecord", "RatingsRecord", "GameRecord", "EnvTotals",
        "ResumeRecord", "RestartRecord", "StartRecord", "EndRecord", "PairCount", "TranscriptRecord", "TranscriptTurn",
    )},
    **{n: "state" for n in ("Stateful", "rng_state", "set_rng_state")},
    # running: the Python API (an executor's names are in unstable_core.executors)
    **{n: "api" for n in ("run", "build", "Run")},
    "RunResult": "result",
    "save_figure": "plotting",
    **{n: "population" for n in ("run_mixture", "run_model", "run_inference", "run_config", "checkpoint_uids")},
    **{n: "groups" for n in ("group_advantages", "group_keys")},
    "build_component": "runtime.building",
    **{n: "runtime.roles.registry" for n in ("ModelRegistry", "ModelEntry", "checkpoint_ref")},
    **{n: "builtin.inference_scripted" for n in ("valid_moves",)},
    "boxed_answer": "builtin.templates",
    "expand_choices": "choices",
}

__all__ = ["__version__", "hookimpl", *_LAZY]


_lazy = lazy_names(__name__, _LAZY)


def __getattr__(name: str) -> Any:
    return _lazy(name)


def __dir__() -> list[str]:
    return sorted(__all__)
