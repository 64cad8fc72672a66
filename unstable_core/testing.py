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

Toy environments (``toy_plugin``): env provider ``toy`` with ``PickBest-v0``, a two-player game
whose best action is known (``[C]``), plus a tabular softmax policy served by inference
``tabular`` and trained by learner ``tabular-reinforce``: learning must visibly happen in seconds,
with no torch.
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from . import hookimpl
from .components import (
    PROTOCOLS,
    EnvProviderSpec,
    InferenceSpec,
    LearnerSpec,
)
from .runtime.jsonio import write_json_atomic
from .runtime.registry import ModelRegistry
from .types import (
    Batch,
    Checkpoint,
    Completion,
    EnvSpec,
    GameResult,
    GameSpec,
    GenerationRequest,
    ModelRef,
    PlayerTrajectory,
    Step,
    Turn,
)

# ---------------------------------------------------------------------------------------------
# Toy game: PickBest
# ---------------------------------------------------------------------------------------------

TOY_ACTIONS = ["A", "B", "C", "D"]
TOY_BEST = "C"


class PickBestGame:
    """Two players pick a letter in turn. Whoever picks the best letter (C) while the other does
    not wins (+1 / -1); otherwise it is a draw. An unknown letter is an invalid move and loses."""

    def __init__(self, best: str = TOY_BEST, actions: list[str] | None = None) -> None:
        self.best = best
        self.actions = actions or list(TOY_ACTIONS)

    def reset(self, num_players: int, seed: int) -> None:
        self.n = num_players
        self.picks: dict[int, str] = {}
        self.current = 0
        self.invalid_by: int | None = None

    def observe(self) -> tuple[int, str]:
        opts = ", ".join(f"'[{a}]'" for a in self.actions)
        return self.current, f"You are Player {self.current}. Pick the best letter.\nAvailable moves: {opts}"

    def step(self, action: str) -> tuple[bool, bool]:
        letter = action.strip().strip("[]").strip().upper()
        if letter not in self.actions:
            self.invalid_by = self.current
            return True, True
        self.picks[self.current] = letter
        self.current += 1
        return self.current >= self.n, False

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
        info = {p: {"invalid_move": p == self.invalid_by} for p in range(self.n)}
        if self.invalid_by is not None:
            return {p: (-1.0 if p == self.invalid_by else 1.0) for p in range(self.n)}, info
        good = {p for p, a in self.picks.items() if a == self.best}
        if len(good) == 1:
            (w,) = good
            return {p: (1.0 if p == w else -1.0) for p in range(self.n)}, info
        return {p: 0.0 for p in range(self.n)}, info


class ToyProvider:
    def make(self, env: EnvSpec) -> PickBestGame:
        if not env.env_id.startswith("PickBest"):
            raise ValueError(f"toy provider has no env {env.env_id!r}")
        return PickBestGame(**env.kwargs)

    def known_env_ids(self) -> list[str]:
        return ["PickBest-v0"]


# ---------------------------------------------------------------------------------------------
# Tabular softmax policy: inference + learner sharing a JSON checkpoint format
# ---------------------------------------------------------------------------------------------


def _softmax(logits: list[float]) -> list[float]:
    m = max(logits)
    e = [math.exp(x - m) for x in logits]
    s = sum(e)
    return [x / s for x in e]


def load_table(path: str | None) -> dict[str, list[float]]:
    if not path:
        return {}
    with open(os.path.join(path, "table.json"), encoding="utf-8") as fh:
        return json.load(fh)["logits"]


def toy_probabilities(table: dict[str, list[float]], key: str = "pick") -> list[float]:
    return _softmax(table.get(key, [0.0] * len(TOY_ACTIONS)))


class TabularInference:
    """Samples a letter from softmax(logits); token id = letter index; logprob returned."""

    tokenizer = None

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, list[float]]] = {}

    async def generate(self, request: GenerationRequest) -> Completion:
        ref = request.model
        if ref.uid not in self.tables:
            self.tables[ref.uid] = load_table(ref.adapter_path)
        probs = toy_probabilities(self.tables[ref.uid])
        a = random.Random(request.seed).choices(range(len(TOY_ACTIONS)), weights=probs)[0]
        return Completion(
            text=f"\\boxed{{{TOY_ACTIONS[a]}}}",
            prompt_token_ids=[0],
            completion_token_ids=[a],
            logprobs=[math.log(probs[a])],
            policy_version=ref.version,
        )

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        self.tables[checkpoint.uid] = load_table(checkpoint.path)
        return checkpoint.version

    def close(self) -> None:
        pass


class TabularOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lr: float = Field(0.5, gt=0, description="Step size on the logits.")


class TabularLearner:
    """REINFORCE on a softmax table: logits += lr * mean(reward * (onehot(a) - probs))."""

    def __init__(self, options: TabularOptions) -> None:
        self.lr = options.lr
        self.logits = [0.0] * len(TOY_ACTIONS)
        self.version = 0
        self.batches: list[Batch] = []

    def update(self, batch: Batch) -> dict[str, float]:
        probs = _softmax(self.logits)
        grad = [0.0] * len(self.logits)
        for s in batch.steps:
            a = s.turn.completion_token_ids[0]
            for i in range(len(grad)):
                grad[i] += s.reward * ((i == a) - probs[i]) / len(batch.steps)
        self.logits = [x + self.lr * g for x, g in zip(self.logits, grad)]
        self.version += 1
        self.batches.append(batch)
        return {"p_best": _softmax(self.logits)[TOY_ACTIONS.index(TOY_BEST)], "grad_norm": math.sqrt(sum(g * g for g in grad))}

    def state_dict(self) -> dict[str, Any]:
        return {"logits": list(self.logits), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.logits, self.version = list(state["logits"]), state["version"]

    def save_checkpoint(self, directory: str, uid: str) -> Checkpoint:
        write_json_atomic(Path(directory) / "table.json", {"logits": {"pick": self.logits}, "version": self.version})
        return Checkpoint(uid=uid, version=self.version, path=directory)


class _ToyPlugin:
    """The toy env, inference and learner as one plugin object."""

    @hookimpl
    def unstable_envs(self) -> list[EnvProviderSpec]:
        return [EnvProviderSpec(name="toy", summary="Toy games with a known best action (PickBest-v0)", factory=lambda o, ctx: ToyProvider())]

    @hookimpl
    def unstable_inference_backends(self) -> list[InferenceSpec]:
        return [InferenceSpec(name="tabular", summary="Tabular softmax policy over the toy game's letters", factory=lambda o, ctx: TabularInference())]

    @hookimpl
    def unstable_learners(self) -> list[LearnerSpec]:
        return [LearnerSpec(name="tabular-reinforce", summary="REINFORCE on a softmax table", config=TabularOptions,
                            factory=lambda o, ctx: TabularLearner(o), drop_zero_advantage=True)]


toy_plugin = _ToyPlugin()


def toy_config(**overrides: Any) -> dict[str, Any]:
    """A RunConfig dict: the tabular policy learns PickBest-v0 by self-play, evaluated against
    ``random-valid``."""
    cfg: dict[str, Any] = {
        "name": "toy",
        "seed": 0,
        "env": {"name": "toy"},
        "train_envs": [{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 2}],
        "model": {"model": "tabular", "backend": "tabular"},
        "opponents": ["random-valid"],
        "learner": {"name": "tabular-reinforce", "lr": 1.0},
        "inference": {"name": "tabular"},
        "buffer": {"name": "step", "capacity": 256},
        "collection": {"num_train_games": 8, "num_eval_games": 8, "eval_games": 40},
        "training": {"learning_steps": 20, "batch_size": 16, "eval_every": 10},
        "trackers": [{"name": "jsonl"}],
    }
    for key, value in overrides.items():
        cfg[key] = value
    return cfg


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def make_plugin_system() -> Any:
    """Factory for a fresh plugin system with chosen plugins (objects or (name, object) pairs) and
    no entry points."""
    from .plugins import load_plugins

    def make(*plugins: Any, builtins: bool = True, strict: bool = True) -> Any:
        # a plugin, or a (name, plugin) pair
        extra = [p if isinstance(p, tuple) else (getattr(p, "__name__", type(p).__name__), p) for p in plugins]
        return load_plugins(builtins=builtins, entry_points=False, extra=extra, strict=strict)

    return make


@pytest.fixture
def toy_run_config() -> Any:
    return toy_config


# ---------------------------------------------------------------------------------------------
# Conformance kit
# ---------------------------------------------------------------------------------------------


def sample_result(env_id: str = "PickBest-v0", rewards: dict[int, float] | None = None, train_seats: list[int] | None = None,
                  seats: list[ModelRef] | None = None) -> GameResult:
    """A finished two-player game with one turn per player, for component tests."""
    rewards = rewards if rewards is not None else {0: 1.0, 1: -1.0}
    seats = seats or [ModelRef(uid="a", kind="base"), ModelRef(uid="b")]
    trajs = [
        PlayerTrajectory(
            player_id=p, model=seats[p], final_reward=rewards.get(p, 0.0),
            turns=[Turn(player_id=p, index=p, observation="obs", prompt="prompt", completion="\\boxed{C}",
                        completion_token_ids=[2], logprobs=[-1.0], action="[C]", format_ok=True)],
        )
        for p in range(len(seats))
    ]
    spec = GameSpec(game_idx=0, seed=1, env=EnvSpec(env_id=env_id, num_players=len(seats)), seats=seats,
                    train_seats=train_seats if train_seats is not None else [0])
    return GameResult(game=spec, trajectories=trajs, rewards=rewards, num_turns=len(seats))


def check_state_round_trip(make: Any, exercise: Any) -> None:
    """The ``Stateful`` conformance check: a component exercised, its state saved as a snapshot
    saves it (tensors apart, the rest through JSON) and loaded into a fresh component; exercised
    once more, both must then hold the same state and give the same results.

    ``make()`` builds a component; ``exercise(component)`` uses it and returns what it produced."""
    import json

    from .runtime.snapshots import join_tensors, split_tensors
    from .state import Stateful

    first = make()
    assert isinstance(first, Stateful), f"{type(first).__name__} does not implement state_dict/load_state_dict"
    exercise(first)
    tensors: dict[str, Any] = {}
    saved = join_tensors(json.loads(json.dumps(split_tensors(first.state_dict(), tensors))), tensors)
    second = make()
    second.load_state_dict(saved)
    assert _comparable(exercise(second)) == _comparable(exercise(first)), "a restored component behaves differently"
    assert _comparable(second.state_dict()) == _comparable(first.state_dict()), "a restored component's state differs"


def _comparable(value: Any) -> Any:
    """Plain values to compare: pydantic models dumped, tensors as lists."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if type(value).__module__.startswith("torch") and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    return value


class _Contract:
    kind: str = ""
    plugin: Any = None
    name: str = ""
    options: dict[str, Any] = {}

    @pytest.fixture
    def system(self) -> Any:
        from .plugins import load_plugins

        extra = [] if self.plugin is None else [(getattr(self.plugin, "__name__", "plugin-under-test"), self.plugin)]
        return load_plugins(builtins=True, entry_points=False, extra=extra, strict=True)

    @pytest.fixture
    def spec(self, system: Any) -> Any:
        return system.get(self.kind, self.name)

    @pytest.fixture
    def registry(self) -> ModelRegistry:
        reg = ModelRegistry()
        reg.add(ModelRef(uid="random-valid", model="random-valid"))
        reg.add(ModelRef(uid="greedy", model="greedy"))
        reg.add(ModelRef(uid="base", kind="base", backend="tabular"), current=True)
        return reg

    @pytest.fixture
    def component(self, spec: Any, system: Any, tmp_path: Path) -> Any:
        return build_component_for(self, spec, system, tmp_path)

    def test_record_is_valid(self, spec: Any) -> None:
        from .components import KINDS

        assert isinstance(spec, KINDS[self.kind][1])
        assert spec.summary and "\n" not in spec.summary

    def test_options_have_descriptions_and_defaults_validate(self, spec: Any) -> None:
        for fname, field in spec.config.model_fields.items():
            assert field.description, f"option {fname!r} of {self.kind}:{self.name} has no description"
        spec.config.model_validate(dict(self.options))

    def test_unknown_option_is_rejected(self, spec: Any) -> None:
        from pydantic import ValidationError

        with pytest.raises(ValidationError):
            spec.config.model_validate({**self.options, "no_such_option_xyz": 1})

    def test_factory_satisfies_protocol(self, component: Any) -> None:
        proto = PROTOCOLS.get(self.kind)
        if proto is not None:
            assert isinstance(component, proto)


class EnvSamplerContract(_Contract):
    kind = "env_sampler"

    def envs(self) -> list[EnvSpec]:
        return [EnvSpec(env_id="TicTacToe-v0"), EnvSpec(env_id="KuhnPoker-v0"), EnvSpec(env_id="PickBest-v0")]

    def test_samples_from_the_given_envs(self, component: Any) -> None:
        envs = self.envs()
        rng = random.Random(0)
        for _ in range(200):
            assert component.sample(envs, rng) in envs

    def test_same_seed_same_choices(self, spec: Any, system: Any, tmp_path: Path) -> None:
        def draws() -> list[str]:
            comp = build_component_for(self, spec, system, tmp_path)
            rng = random.Random(42)
            return [comp.sample(self.envs(), rng).env_id for _ in range(50)]

        assert draws() == draws()


class ModelSamplerContract(_Contract):
    kind = "model_sampler"

    def test_fills_every_seat_with_registered_models(self, component: Any, registry: Any) -> None:
        env = EnvSpec(env_id="TicTacToe-v0", num_players=3)
        anchor = registry.current
        for seed in range(50):
            out = component.sample(env, anchor, 2, registry, random.Random(seed))
            assert len(out) == 2
            assert all(isinstance(m, ModelRef) and m.uid in registry.entries for m in out)


class RaterContract(_Contract):
    kind = "rater"

    def test_ratings_cover_players_after_a_game(self, component: Any, registry: Any) -> None:
        seats = [registry.get("base").ref, registry.get("greedy").ref]
        result = sample_result(seats=seats)
        registry.record_game(result)
        component.update(result, registry)
        ratings = component.ratings(registry)
        assert {"base", "greedy"} <= set(ratings)


class RewardTransformContract(_Contract):
    kind = "reward_transform"

    def test_callable_for_its_stage(self, spec: Any, component: Any) -> None:
        result = sample_result()
        if spec.stage == "final":
            out = component(dict(result.rewards), "PickBest-v0")
            assert set(out) == set(result.rewards)
        else:
            step = Step(env_id="PickBest-v0", game_idx=0, player_id=0, turn_index=0, num_turns=1,
                        turn=result.trajectories[0].turns[0], final_reward=1.0, reward=1.0)
            out = component(step) if spec.stage == "step" else component([step, step])
            assert isinstance(out, Step) if spec.stage == "step" else all(isinstance(s, Step) for s in out)


class BufferContract(_Contract):
    kind = "buffer"

    def test_add_then_draw_without_replacement(self, component: Any) -> None:
        from .runtime.rewards import RewardPipelines

        for i in range(5):
            assert component.add(RewardPipelines().episodes(sample_result(train_seats=[0, 1]))) == 2
        n = component.size()
        assert n == 10
        steps = component.draw(4)
        assert 4 <= len(steps) <= n and all(isinstance(s, Step) for s in steps)
        assert component.size() == n - len(steps)

    def test_state_round_trip_when_stateful(self, spec: Any, system: Any, tmp_path: Path) -> None:
        from .runtime.rewards import RewardPipelines
        from .state import Stateful

        if not isinstance(build_component_for(self, spec, system, tmp_path), Stateful):
            pytest.skip("not Stateful: rebuilt fresh on resume")

        def exercise(buffer: Any) -> list[Step]:
            for i in range(4):
                buffer.add(RewardPipelines().episodes(sample_result(train_seats=[0, 1])))
            return buffer.draw(3)

        check_state_round_trip(lambda: build_component_for(self, spec, system, tmp_path), exercise)


class TemplateContract(_Contract):
    kind = "template"

    def test_render_and_extract(self, component: Any) -> None:
        prompt = component.render("Available moves: '[4]'")
        assert "Available moves: '[4]'" in prompt
        action, ok = component.extract("I will play \\boxed{4}")
        assert isinstance(action, str) and isinstance(ok, bool)


class InferenceContract(_Contract):
    kind = "inference"
    model: ModelRef = ModelRef(uid="m", model="random-valid")

    def test_generate_returns_completion(self, component: Any) -> None:
        import asyncio

        req = GenerationRequest(model=self.model, prompt="Available moves: '[A]', '[B]'", observation="Available moves: '[A]', '[B]'")
        out = asyncio.run(component.generate(req))
        assert isinstance(out, Completion)


class TrackerContract(_Contract):
    kind = "tracker"

    def test_log_and_close(self, component: Any) -> None:
        from .records import TrainRecord

        assert isinstance(component.wants_game_records, bool)
        component.log(TrainRecord(step=1, staleness_mean=0.0, staleness_max=0.0, batch_steps=4.0, loss=0.5))
        component.close()


class EnvProviderContract(_Contract):
    kind = "env"

    def test_known_envs_play_to_the_end(self, component: Any) -> None:
        from .builtin.inference_scripted import agent_random_valid
        from .builtin.templates import extract_boxed_action

        for env_id in component.known_env_ids()[:3]:
            game = component.make(EnvSpec(env_id=env_id))
            game.reset(num_players=2, seed=0)
            done, turns = False, 0
            while not done and turns < 500:
                _pid, obs = game.observe()
                action, _ = extract_boxed_action(agent_random_valid(obs, random.Random(turns)))
                done, _invalid = game.step(action)
                turns += 1
            rewards, _info = game.close()
            assert done and set(rewards) <= {0, 1}


def build_component_for(contract: _Contract, spec: Any, system: Any, tmp_path: Path) -> Any:
    """Build ``spec`` (which a parametrised contract may pick by another name) as a run would."""
    from .runtime.plan import build_component

    return build_component(spec.kind, spec.name, contract.options, plugins=system, run_dir=str(tmp_path))


class LearnerContract(_Contract):
    kind = "learner"


class ExecutorContract(_Contract):
    kind = "executor"


__all__ = [
    "PickBestGame", "ToyProvider", "TabularInference", "TabularLearner", "toy_plugin", "toy_config", "sample_result",
    "toy_probabilities", "load_table",
    "EnvSamplerContract", "ModelSamplerContract", "RaterContract", "RewardTransformContract", "BufferContract",
    "TemplateContract", "InferenceContract", "TrackerContract", "EnvProviderContract", "LearnerContract", "ExecutorContract",
]
