"""``ExecutorContract``: an executor places the roles; the results must not depend on where.

Subclass it, set ``plugin``, ``name`` and ``options`` (what the run's ``[executor]`` table gets)::

    class TestMyExecutor(ExecutorContract):
        plugin = my_executor_plugin
        name = "my-executor"
        options = {"replicas": 2}

Its handles must honour the role protocols of ``unstable_core.executors`` (every method the
driver awaits, as a coroutine function). The other checks run whole runs through the public API,
once with the executor under test and once with ``local``: a scripted tournament gives the same evaluation records (games, win, draw and
loss rates per pair); a sync-mode training run of the toy tabular learner gives the same train
and evaluation records and the same final checkpoint; a run that fails in a role (a model
sampler returning garbage) ends with the same one-line error. The plugin system of the test has
the toy plugin (``unstable_core.testing.toy_plugin``) and ``BrokenSampler``, so an executor that
builds roles in other processes must give them the test's plugins (``PluginSystem.recipe``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .. import hookimpl
from ..components import ModelSamplerSpec
from .contracts import ComponentContract
from .toy import toy_config, toy_plugin

TIMING = {"time", "games_per_s", "duration_s", "update_s", "learner_tokens_per_s"}  # wall-clock figures

TOURNAMENT: dict[str, Any] = {
    "name": "contract-tournament", "seed": 0,
    "train_envs": [{"env_id": "TicTacToe-v0-train"}, {"env_id": "KuhnPoker-v0-train"}],
    "opponents": ["greedy", "random-valid", "first-valid"],
    "model_sampler": {"name": "fixed"},
    "collection": {"tournament_games": 96, "num_train_games": 16},
    "trackers": [],
}


class _BrokenSamplerPlugin:
    """Model sampler ``broken``: returns a uid string instead of ModelRefs (the same one every
    call, so the message does not depend on which of several concurrent calls fails first)."""

    @hookimpl
    def unstable_model_samplers(self) -> list[ModelSamplerSpec]:
        return [ModelSamplerSpec(name="broken", summary="Returns uid strings (for executor tests)", factory=lambda o, ctx: self)]

    def sample(self, env: Any, anchor: Any, num_seats: int, registry: Any, rng: Any) -> list[str]:
        return ["no-such-model"] * num_seats


BrokenSampler = _BrokenSamplerPlugin()


def outcomes(result: Any) -> list[tuple[Any, ...]]:
    return sorted((r.env_id, r.model, r.opponent, r.games, r.failed, r.win_rate, r.draw_rate, r.loss_rate)
                  for r in result.eval_records)


def records(run_dir: Path, kinds: tuple[str, ...] = ("train", "eval")) -> list[dict[str, Any]]:
    """The run's metrics records of these kinds, without wall-clock fields."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in lines if r["type"] in kinds]


class ExecutorContract(ComponentContract):
    kind = "executor"
    other_plugins = (("toy", toy_plugin), ("broken-sampler", BrokenSampler))

    def with_executor(self, cfg: dict[str, Any]) -> dict[str, Any]:
        return {**cfg, "executor": {"name": self.name, **self.options}}

    def test_its_handles_honour_the_role_protocols(self, system: Any, tmp_path: Path) -> None:
        import unstable_core

        from ..executors import RoleHandles
        from ..runtime.building import Builder

        cfg = self.with_executor(toy_config(training={"learning_steps": 1}))
        plan = unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system).plan
        executor = Builder(plan, system).build("executor")
        try:
            roles = executor.start(plan)
            assert isinstance(roles, RoleHandles), f"start() returned {type(roles).__name__}"
            assert roles.learner is not None and roles.rollouts, "a training run has a learner and rollouts"
            assert roles.problems() == []
        finally:
            executor.shutdown()

    def test_a_tournament_gives_the_same_records_as_local(self, system: Any, tmp_path: Path) -> None:
        import unstable_core

        local = unstable_core.run(TOURNAMENT, run_dir=tmp_path / "local", plugins=system)
        mine = unstable_core.run(self.with_executor(TOURNAMENT), run_dir=tmp_path / "mine", plugins=system)
        assert mine.status == "completed" and mine.games_played == local.games_played == 96
        assert outcomes(mine) == outcomes(local)

    def test_sync_training_gives_the_same_records_and_policy_as_local(self, system: Any, tmp_path: Path) -> None:
        import unstable_core

        cfg = toy_config(
            training={"learning_steps": 6, "batch_size": 16, "eval_every": 3},
            model_sampler={"name": "fixed"},
            train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
            collection={"mode": "sync", "num_train_games": 8, "num_eval_games": 8, "eval_games": 24},
        )
        local = unstable_core.run(cfg, run_dir=tmp_path / "local", plugins=system)
        mine = unstable_core.run(self.with_executor(cfg), run_dir=tmp_path / "mine", plugins=system)
        assert mine.status == local.status == "completed" and mine.learner_steps == local.learner_steps == 6
        assert records(tmp_path / "mine") == records(tmp_path / "local")
        final = Path("checkpoints", "ckpt-6", "table.json")
        assert (tmp_path / "mine" / final).read_text() == (tmp_path / "local" / final).read_text()

    def test_an_error_in_a_role_ends_the_run_with_the_same_message(self, system: Any, tmp_path: Path) -> None:
        import unstable_core

        from ..errors import UnstableError

        cfg = {**TOURNAMENT, "model_sampler": {"name": "broken"}}
        errors = []
        for name, config in (("local", cfg), ("mine", self.with_executor(cfg))):
            with pytest.raises(UnstableError) as info:
                unstable_core.run(config, run_dir=tmp_path / name, plugins=system)
            errors.append((type(info.value).__name__, str(info.value)))
        assert errors[0] == errors[1] and "model_sampler 'broken'" in errors[0][1]
