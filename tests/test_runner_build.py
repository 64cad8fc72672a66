"""The game runner builds its objects without validating again where every value already has its
field's exact type (``basemodel.trusted``); these tests check that what it builds equals what
validation would build, and that any other value still goes through validation."""

from __future__ import annotations

import asyncio

import pytest

from unstable_core.basemodel import trusted
from unstable_core.builtin.env_textarena import TextArenaOptions, TextArenaProvider
from unstable_core.builtin.inference_scripted import ScriptedInference
from unstable_core.builtin.templates import FormatTemplate
from unstable_core.runtime.game.runner import GameRunner
from unstable_core.testing import sample_result
from unstable_core.types import (
    Completion,
    EnvSpec,
    GameResult,
    GameSpec,
    GenerationRequest,
    ModelRef,
    PlayerTrajectory,
    Turn,
)


def _spec(env_id: str, agents: tuple[str, str], seed: int = 5) -> GameSpec:
    seats = [ModelRef(uid=f"{a}-{i}", model=a) for i, a in enumerate(agents)]
    return GameSpec(game_idx=0, seed=seed, env=EnvSpec(env_id=env_id), seats=seats)


def _runner(template: FormatTemplate | None = None, backend=None) -> GameRunner:
    template = template or FormatTemplate("{observation}")
    backend = backend or ScriptedInference()
    return GameRunner(TextArenaProvider(TextArenaOptions()), lambda n: template, lambda n: backend)


def _assert_complete(obj) -> None:
    """Every field is set, with the value validation keeps, recursively."""
    cls = type(obj)
    assert set(obj.__dict__) - {"outcomes"} == set(cls.model_fields), cls.__name__
    assert obj.model_fields_set == set(cls.model_fields)


@pytest.mark.parametrize(
    "env_id,agents",
    [
        ("TicTacToe-v0", ("random-valid", "greedy")),
        ("KuhnPoker-v0-train", ("random-valid", "first-valid")),
        ("ConnectFour-v0", ("random-valid", "random-valid")),
        ("TicTacToe-v0", ("garbage", "random-valid")),
    ],
)
def test_runner_result_equals_its_validated_copy(env_id, agents):
    for seed in range(4):
        result = asyncio.run(_runner().play(_spec(env_id, agents, seed)))
        # garbage can make TextArena raise (a 5,000-digit move): that game fails, and is built too
        assert result.outcome == "finished" or (agents[0] == "garbage" and result.outcome == "failed")
        again = GameResult.model_validate(result.model_dump())
        assert again == result
        assert again.model_dump() == result.model_dump()
        _assert_complete(result)
        for trajectory in result.trajectories:
            assert type(trajectory) is PlayerTrajectory
            _assert_complete(trajectory)
            for turn in trajectory.turns:
                assert type(turn) is Turn
                _assert_complete(turn)
                assert type(turn.format_ok) is bool and type(turn.invalid) is bool


def test_a_coercible_component_value_is_validated_and_coerced():
    class IntFormatTemplate(FormatTemplate):
        def extract(self, completion):
            action, ok = super().extract(completion)
            return action, int(ok)  # 1/0: pydantic's bool coercion applies, as to any component value

    result = asyncio.run(_runner(IntFormatTemplate("{observation}")).play(_spec("TicTacToe-v0", ("random-valid", "random-valid"))))
    assert result.outcome == "finished"
    turns = [t for tr in result.trajectories for t in tr.turns]
    assert turns and all(type(t.format_ok) is bool and t.format_ok for t in turns)


def test_a_non_string_prompt_fails_the_game_with_a_validation_error():
    class ListPromptTemplate(FormatTemplate):
        def render(self, observation, tokenizer=None):
            return ["not", "a", "string"]

    result = asyncio.run(_runner(ListPromptTemplate("{observation}")).play(_spec("TicTacToe-v0", ("random-valid", "random-valid"))))
    assert result.outcome == "failed"
    assert result.error.startswith("ValidationError") and "GenerationRequest" in result.error


def test_a_backend_answering_a_dict_is_validated_into_a_completion():
    class DictBackend(ScriptedInference):
        async def generate(self, request: GenerationRequest):
            return {"text": self.complete(request).text, "policy_version": "3"}  # a str version: coerced

    class BrokenBackend(ScriptedInference):
        async def generate(self, request: GenerationRequest):
            return {"text": None}

    ok = asyncio.run(_runner(backend=DictBackend()).play(_spec("TicTacToe-v0", ("random-valid", "random-valid"))))
    assert ok.outcome == "finished"
    assert all(t.policy_version == 3 for tr in ok.trajectories for t in tr.turns)
    broken = asyncio.run(_runner(backend=BrokenBackend()).play(_spec("TicTacToe-v0", ("random-valid", "random-valid"))))
    assert broken.outcome == "failed" and broken.error.startswith("ValidationError") and "Completion" in broken.error


def test_a_pickled_result_loads_as_an_equal_model_with_the_same_fields_set():
    import pickle

    from unstable_core import ModelRef

    result = asyncio.run(_runner().play(_spec("KuhnPoker-v0-train", ("random-valid", "greedy"), 1)))
    loaded = pickle.loads(pickle.dumps(result))
    assert loaded == result and loaded.model_dump() == result.model_dump() and loaded.outcomes == result.outcomes
    _assert_complete(loaded)
    assert all(type(t) is Turn for tr in loaded.trajectories for t in tr.turns)
    partial = pickle.loads(pickle.dumps(ModelRef(uid="a")))  # defaults stay unset, as pydantic keeps them
    assert partial.model_fields_set == {"uid"} and partial == ModelRef(uid="a")
    partial.version = 3  # an ordinary, mutable model
    assert partial.model_dump()["version"] == 3


def test_trusted_builds_what_validation_builds():
    data = {"text": "\\boxed{[3]}", "prompt_token_ids": [1, 2], "completion_token_ids": [3], "logprobs": [-0.5], "policy_version": 2,
            "trainable": True, "truncated": False, "choice_token_ids": [], "choice_probabilities": []}
    built = trusted(Completion, dict(data))
    assert built == Completion(**data) and built.model_dump() == data
    assert built.model_fields_set == set(data)
    built.policy_version = 4  # an ordinary, mutable model
    assert built.policy_version == 4 and built.model_dump()["policy_version"] == 4
    other = trusted(Completion, dict(data))  # shares the class's set of field names: still every field
    assert other.model_fields_set == set(data) and other.model_dump(exclude_unset=True) == data


def test_outcomes_are_computed_once_and_stay_out_of_dumps_and_equality():
    a = sample_result(rewards={0: 1.0, 1: -1.0})
    b = GameResult.model_validate(a.model_dump())
    assert a.outcomes == {0: "win", 1: "loss"}
    assert a.outcomes is a.outcomes  # cached on the instance
    assert "outcomes" not in a.model_dump() and a == b  # b has not computed its outcomes yet


def _league(cfg, plugins, run_dir):
    import unstable_core
    from unstable_core.executors import build_role

    return build_role("league", unstable_core.build(cfg, run_dir=run_dir, plugins=plugins).plan, plugins)


def test_scheduled_specs_equal_their_validated_copies(tmp_path, make_plugin_system):
    import asyncio

    from unstable_core import load_plugins
    from unstable_core.testing.toy import ToyPlugin, toy_config

    tournament = {
        "name": "t", "train_envs": ["TicTacToe-v0-train"], "opponents": ["greedy", "random-valid"],
        "model_sampler": {"name": "fixed"}, "trackers": [{"name": "jsonl"}],
    }
    specs = asyncio.run(_league(tournament, load_plugins(), tmp_path / "t").schedule(3, "tournament"))
    specs += asyncio.run(_league(toy_config(), make_plugin_system(ToyPlugin()), tmp_path / "r").schedule(3, "train"))
    assert {s.mode for s in specs} == {"tournament", "train"}
    for spec in specs:
        assert type(spec) is GameSpec
        _assert_complete(spec)
        assert GameSpec.model_validate(spec.model_dump()) == spec


def test_a_sampler_answering_a_dict_seat_fails_naming_the_sampler(tmp_path):
    import asyncio

    from unstable_core import ComponentError, load_plugins

    cfg = {"name": "t", "train_envs": ["TicTacToe-v0-train"], "opponents": ["random-valid"], "model_sampler": {"name": "fixed"}}
    league = _league(cfg, load_plugins(), tmp_path / "t")
    league.model_sampler.sample = lambda env, anchor, n, registry, rng: [{"uid": "x", "model": "first-valid"}] * n
    with pytest.raises(ComponentError, match="model_sampler 'fixed' from plugin 'core.samplers'.*expected a ModelRef"):
        asyncio.run(league.schedule(1, "tournament"))


def test_a_rollout_role_plays_on_whichever_event_loop_calls_it(tmp_path):
    """A role built with the public ``build_role`` and used from two ``asyncio.run`` calls (a
    script, a notebook cell each): its game workers belong to the first loop, which is closed by
    the second call; they are started anew there instead of the batch waiting forever."""
    import asyncio

    import unstable_core
    from unstable_core.executors import build_role

    job = unstable_core.build({"name": "t", "train_envs": ["TicTacToe-v0-train"], "opponents": ["greedy", "random-valid"],
                               "model_sampler": {"name": "fixed"}}, run_dir=tmp_path / "t")
    league, rollout = (build_role(role, job.plan, job.plugins) for role in ("league", "rollout"))
    specs = asyncio.run(league.schedule(6, "tournament"))

    async def play():
        return await asyncio.wait_for(rollout.play(specs), timeout=30)

    first, second = asyncio.run(play()), asyncio.run(play())
    assert [r.outcome for r in first] == [r.outcome for r in second] == ["finished"] * 6
    assert [r.rewards for r in first] == [r.rewards for r in second]  # the same seeds, the same games
