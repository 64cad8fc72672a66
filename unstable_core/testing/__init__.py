"""Test kit for plugin authors (a pytest plugin, loaded automatically once unstable-core is installed).

Fixtures
    ``make_plugin_system``  factory: ``make_plugin_system(my_plugin, builtins=True)`` returns a
                            fresh ``PluginSystem`` with only the chosen plugins (no entry points).
    ``toy_run_config``      factory: a small RunConfig dict on the toy game, to run a real loop.

Conformance classes, one per component kind: subclass one in your tests and set ``plugin``
(your plugin module or object), ``name`` and optionally ``options``::

    from unstable_core.testing import EnvSamplerContract
    import unstable_curriculum.plugin as plugin

    class TestCurriculum(EnvSamplerContract):
        plugin = plugin
        name = "curriculum"

``LearnerContract`` also wants a ``model`` fixture (the model being trained) and ``inference`` (the
backend that serves its checkpoints); learners on the hf toolkit subclass
``unstable_hf.testing.LoraLearnerContract``, which provides both and checks the loss gradient.

State: ``check_state_round_trip(make, exercise)`` is the ``Stateful`` conformance check (each
contract runs it on a Stateful component); ``run_with_kills`` SIGKILLs a run in a child process at
random points and resumes it, ``restored_state`` restores a run's roles from its latest snapshot,
``comparable_metrics`` reads a run's metrics as two runs of the same config must agree on them.

Toy environments (``toy_plugin``): env provider ``toy`` with ``PickBest-v0``, a two-player game
whose best action is known (``[C]``), plus a tabular softmax policy served by inference
``tabular`` and trained by learner ``tabular-reinforce``: learning must visibly happen in seconds,
with no torch.
"""

from __future__ import annotations

from typing import Any

import pytest

from .contracts import (
    BufferContract,
    EnvProviderContract,
    EnvSamplerContract,
    InferenceContract,
    ModelSamplerContract,
    RaterContract,
    RewardTransformContract,
    TemplateContract,
    TrackerContract,
    check_state_round_trip,
    population_registry,
    sample_result,
)
from .executor import ExecutorContract
from .learner import LearnerContract, make_steps
from .resume import comparable_metrics, kill_after, restored_state, run_with_kills, start_run
from .toy import (
    TOY_ACTIONS,
    TOY_BEST,
    PickBestGame,
    TabularInference,
    TabularLearner,
    TabularOptions,
    ToyProvider,
    load_table,
    toy_config,
    toy_plugin,
    toy_probabilities,
)

# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


def pytest_configure(config: Any) -> None:
    """The ``matrix`` marker, registered wherever the kit is installed (a plugin's tests run
    outside this repository too): a cell of a consistency matrix, run with ``UNSTABLE_MATRIX=1``."""
    config.addinivalue_line("markers", "matrix: a cell of the consistency matrix; runs with UNSTABLE_MATRIX=1 pytest -m matrix")


@pytest.fixture
def make_plugin_system() -> Any:
    """Factory for a fresh plugin system with chosen plugins (objects or (name, object) pairs) and
    no entry points."""
    from ..plugins import load_plugins

    def make(*plugins: Any, builtins: bool = True, strict: bool = True) -> Any:
        # a plugin, or a (name, plugin) pair
        extra = [p if isinstance(p, tuple) else (getattr(p, "__name__", type(p).__name__), p) for p in plugins]
        return load_plugins(builtins=builtins, entry_points=False, extra=extra, strict=strict)

    return make


@pytest.fixture
def toy_run_config() -> Any:
    return toy_config


__all__ = [
    "PickBestGame", "ToyProvider", "TabularInference", "TabularLearner", "toy_plugin", "toy_config", "sample_result", "population_registry",
    "toy_probabilities", "load_table", "TOY_ACTIONS", "TOY_BEST", "TabularOptions", "check_state_round_trip",
    "run_with_kills", "start_run", "make_steps", "kill_after", "restored_state", "comparable_metrics",
    "EnvSamplerContract", "ModelSamplerContract", "RaterContract", "RewardTransformContract", "BufferContract",
    "TemplateContract", "InferenceContract", "TrackerContract", "EnvProviderContract", "LearnerContract", "ExecutorContract",
]
