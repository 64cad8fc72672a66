"""Built-in samplers, buffers, registry and the conformance kit run on every built-in component."""

import random
from collections import Counter

import pytest

from unstable_core import hookimpl
from unstable_core.builtin import buffers, samplers
from unstable_core.runtime.roles.registry import ModelRegistry
from unstable_core.runtime.roles.rewards import RewardPipelines
from unstable_core.testing import (
    BufferContract,
    EnvProviderContract,
    EnvSamplerContract,
    InferenceContract,
    LearnerContract,
    ModelSamplerContract,
    RaterContract,
    RewardTransformContract,
    TemplateContract,
    TrackerContract,
    sample_result,
    toy_plugin,
)
from unstable_core.types import Checkpoint, EnvSpec, ModelRef


class TestUniform(EnvSamplerContract):
    name = "uniform"


@pytest.mark.parametrize("name", ["mirror", "fixed", "lagged", "random"])
class TestModelSamplers(ModelSamplerContract):
    @pytest.fixture
    def spec(self, system, name):
        return system.get("model_sampler", name)


class TestWins(RaterContract):
    name = "wins"


@pytest.mark.parametrize("tname", ["win-draw-loss", "role-advantage", "role-advantage-by-env", "reward-for-format",
                                   "penalty-for-invalid-move", "penalty-for-truncation", "normalize", "normalize-by-env",
                                   "scale-negative"])
class TestTransforms(RewardTransformContract):
    @pytest.fixture
    def spec(self, system, tname):
        return system.get("reward_transform", tname)


@pytest.mark.parametrize("bname", ["step", "episode"])
class TestBuffers(BufferContract):
    @pytest.fixture
    def spec(self, system, bname):
        return system.get("buffer", bname)


@pytest.mark.parametrize("tpl", ["default", "qwen3-zs", "qwen3-sp", "qwen3-reasoning", "gemma3-zs", "llama-instruct-zs", "chat"])
class TestTemplates(TemplateContract):
    @pytest.fixture
    def spec(self, system, tpl):
        return system.get("template", tpl)


class TestScripted(InferenceContract):
    name = "scripted"


class TestJsonl(TrackerContract):
    name = "jsonl"


class TestConsole(TrackerContract):
    name = "console"


class TestTextArena(EnvProviderContract):
    name = "textarena"


# -- behaviour ----------------------------------------------------------------------------------


def registry_with_checkpoints(n):
    reg = ModelRegistry()
    reg.add(ModelRef(uid="random-valid", model="random-valid"))
    reg.add(ModelRef(uid="greedy", model="greedy"))
    base = ModelRef(uid="base", kind="base", backend="hf", model="m")
    reg.add(base, current=True)
    for v in range(1, n + 1):
        reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"/c/{v}"), base)
    return reg


def test_uniform_weights():
    s = samplers.UniformEnvSampler(samplers.UniformEnvOptions())
    envs = [EnvSpec(env_id="a", weight=3), EnvSpec(env_id="b", weight=1)]
    rng = random.Random(0)
    c = Counter(s.sample(envs, rng).env_id for _ in range(4000))
    assert 0.72 < c["a"] / 4000 < 0.78


def test_mirror_and_fixed():
    reg = registry_with_checkpoints(2)
    anchor = reg.current
    assert anchor.uid == "ckpt-2"
    assert samplers.MirrorSampler().sample(EnvSpec(env_id="x"), anchor, 2, reg, random.Random(0)) == [anchor, anchor]
    fixed = samplers.FixedSampler(samplers.FixedOptions())
    uids = Counter(m.uid for m in fixed.sample(EnvSpec(env_id="x"), anchor, 1000, reg, random.Random(0)))
    assert set(uids) == {"random-valid", "greedy"} and min(uids.values()) > 400
    # in a tournament the anchor is not seated against itself
    assert {m.uid for m in fixed.sample(EnvSpec(env_id="x"), reg.get("greedy").ref, 50, reg, random.Random(0))} == {"random-valid"}


def test_lagged_draws_within_range_and_clamps_to_base():
    reg = registry_with_checkpoints(10)
    s = samplers.LaggedSampler(samplers.LaggedOptions(lag_min=2, lag_max=4))
    versions = {m.version for m in s.sample(EnvSpec(env_id="x"), reg.current, 500, reg, random.Random(0))}
    assert versions == {6, 7, 8}
    reg2 = registry_with_checkpoints(1)
    versions = {m.uid for m in s.sample(EnvSpec(env_id="x"), reg2.current, 50, reg2, random.Random(0))}
    assert versions == {"base"}
    with pytest.raises(ValueError):
        samplers.LaggedSampler(samplers.LaggedOptions(lag_min=3, lag_max=1))


def test_random_sampler_mixes_fixed_and_checkpoints():
    reg = registry_with_checkpoints(3)
    s = samplers.RandomSampler(samplers.RandomOptions(fixed_prob=0.25, max_active=2))
    out = s.sample(EnvSpec(env_id="x"), reg.current, 4000, reg, random.Random(0))
    kinds = Counter(m.kind for m in out)
    assert 0.22 < kinds["fixed"] / 4000 < 0.28
    assert {m.uid for m in out if m.kind != "fixed"} == {"ckpt-2", "ckpt-3"}


def test_step_buffer_evicts_and_draws_without_replacement():
    rp = RewardPipelines(final=[lambda r, e: {k: v * 10 for k, v in r.items()}])
    b = buffers.StepBuffer(buffers.BufferOptions(capacity=6), random.Random(0))
    for _ in range(5):
        assert b.add(rp.episodes(sample_result(train_seats=[0, 1]))) == 2
    assert b.size() == 6 and b.evicted == 4
    steps = b.draw(4)
    assert len(steps) == 4 and b.size() == 2
    assert sorted({s.reward for s in steps}) <= [-10.0, 10.0]
    assert len(b.draw(10)) == 2 and b.size() == 0


def test_failed_games_give_no_steps():
    r = sample_result()
    r.outcome = "failed"
    assert RewardPipelines().episodes(r) == []
    assert RewardPipelines().episodes(sample_result(train_seats=[])) == []


def test_episode_buffer_keeps_episodes_whole():
    b = buffers.EpisodeBuffer(buffers.BufferOptions(capacity=100), random.Random(0))
    for _ in range(3):
        b.add(RewardPipelines().episodes(sample_result(train_seats=[0, 1])))
    steps = b.draw(3)
    assert len(steps) == 3 or len(steps) == 4
    assert b.size() == 6 - len(steps)


class ForgetfulBuffer:
    """A third-party buffer that knows nothing of rewards: the core applies the transforms."""

    capacity = 100

    def __init__(self):
        self.steps = []

    def add(self, episodes):
        self.steps += [s for e in episodes for s in e]
        return sum(map(len, episodes))

    def size(self):
        return len(self.steps)

    def draw(self, n):
        out, self.steps = self.steps[:n], self.steps[n:]
        return out


def test_the_core_applies_final_step_and_sampling_transforms_around_any_buffer(make_plugin_system, tmp_path):
    import asyncio

    import unstable_core
    from unstable_core import BufferSpec, hookimpl
    from unstable_core.runtime.roles.start import build_role
    from unstable_core.testing import toy_config, toy_plugin

    class Plugin:
        @hookimpl
        def unstable_buffers(self):
            return [BufferSpec(name="forgetful", summary="Stores what it is given", factory=lambda o, ctx: ForgetfulBuffer())]

    system = make_plugin_system(toy_plugin, Plugin())
    cfg = toy_config(buffer={"name": "forgetful"}, reward={
        "final": [{"name": "win-draw-loss"}], "step": [{"name": "penalty-for-invalid-move", "reward": 0.5, "penalty": -1.0}],
        "sampling": [{"name": "normalize"}]})
    role = build_role("buffer", unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system).plan, system)
    win = sample_result(rewards={0: 3.0, 1: -2.0}, train_seats=[0, 1])
    assert asyncio.run(role.add([win])) == 2
    assert sorted(s.final_reward for s in role.buffer.steps) == [-1.0, 1.0]  # final: win-draw-loss
    assert sorted(s.reward for s in role.buffer.steps) == [-0.5, 1.5]  # step: +0.5 for a valid move
    batch = asyncio.run(role.draw(2, learner_version=3))
    assert batch.learner_version == 3 and sorted(round(s.reward, 6) for s in batch.steps) == [-1.0, 1.0]  # sampling


def test_the_buffer_role_drops_the_steps_the_learner_declares_useless(make_plugin_system, tmp_path):
    """``LearnerSpec.drop_zero_advantage`` (or ``training.filter_zero_advantage``) is applied by
    the buffer role's draw: zero-reward steps leave the batch, counted in ``Batch.dropped``."""
    import asyncio

    import unstable_core
    from unstable_core.executors import build_role
    from unstable_core.testing import toy_config, toy_plugin

    system = make_plugin_system(toy_plugin)
    games = [sample_result(rewards={0: 0.0, 1: 0.0}, train_seats=[0, 1]), sample_result(rewards={0: 1.0, 1: -1.0}, train_seats=[0, 1])]
    drawn = {}
    for choice in (True, False):
        cfg = toy_config(buffer={"name": "episode", "capacity": 16}, training={"filter_zero_advantage": choice})
        role = build_role("buffer", unstable_core.build(cfg, run_dir=tmp_path / str(choice), plugins=system).plan, system)
        assert asyncio.run(role.add(games)) == 4
        drawn[choice] = asyncio.run(role.draw(4, learner_version=0))
    assert drawn[True].dropped == 2 and sorted(s.reward for s in drawn[True].steps) == [-1.0, 1.0]
    assert drawn[False].dropped == 0 and sorted(s.reward for s in drawn[False].steps) == [-1.0, 0.0, 0.0, 1.0]


def test_registry_counts_pairs_and_snapshot(tmp_path):
    reg = registry_with_checkpoints(1)
    a, g = reg.current, reg.get("greedy").ref
    reg.record_game(sample_result(seats=[a, g], rewards={0: 1, 1: -1}))
    reg.record_game(sample_result(seats=[g, a], rewards={0: 0, 1: 0}))
    e = reg.get("ckpt-1")
    assert (e.games, e.wins, e.draws, e.losses) == (2, 1, 1, 0)
    assert reg.match_count("greedy", "ckpt-1") == 2
    assert reg.head_to_head("ckpt-1", "greedy") == (1, 1, 0)
    assert reg.head_to_head("greedy", "ckpt-1") == (0, 1, 1)
    reg.record_game(sample_result(seats=[g, a], rewards={0: -2, 1: 2}))
    assert reg.mean_reward("ckpt-1", "greedy") == pytest.approx(1.0) and reg.mean_reward("greedy", "ckpt-1") == pytest.approx(-1.0)
    assert reg.mean_reward("ckpt-1", "base") is None
    restored = registry_with_checkpoints(1)
    restored.load_state_dict(reg.state_dict())
    assert restored.mean_reward("greedy", "ckpt-1") == pytest.approx(-1.0) and restored.head_to_head("greedy", "ckpt-1") == (0, 1, 2)
    old = reg.state_dict()  # a snapshot written before the reward sums: six values a pair
    old["pairs"] = [pair[:6] for pair in old["pairs"]]
    restored.load_state_dict(old)
    assert restored.head_to_head("greedy", "ckpt-1") == (0, 1, 2) and restored.mean_reward("greedy", "ckpt-1") == 0.0
    assert reg.exact_payoff("ckpt-1", "greedy") is None  # exact payoffs: only when the run computes them
    reg.record_payoff("greedy", "ckpt-1", 0.25)
    assert reg.exact_payoff("greedy", "ckpt-1") == 0.25 and reg.exact_payoff("ckpt-1", "greedy") == -0.25
    restored.load_state_dict(reg.state_dict())
    assert restored.exact_payoff("ckpt-1", "greedy") == -0.25
    e = reg.get("ckpt-1")
    reg.write(tmp_path / "r.json")
    import json

    snap = json.loads((tmp_path / "r.json").read_text())
    assert snap["current"] == "ckpt-1" and {m["uid"] for m in snap["models"]} >= {"base", "ckpt-1", "greedy"}
    assert not list(tmp_path.glob(".r.json*"))  # no temp file left behind
    assert [r.uid for r in reg.checkpoints()] == ["base", "ckpt-1"]
    with pytest.raises(ValueError):
        reg.add(ModelRef(uid="greedy"))


def test_the_league_registry_satisfies_the_documented_registry_protocol():
    from unstable_core import Registry

    reg = registry_with_checkpoints(2)
    assert isinstance(reg, Registry)
    assert [r.uid for r in reg.checkpoints()] == ["base", "ckpt-1", "ckpt-2"]
    assert reg.current.uid == "ckpt-2"
    assert not isinstance(object(), Registry)


class TestTabularLearner(LearnerContract):
    plugin = toy_plugin
    name = "tabular-reinforce"
    inference = "tabular"
    steps_per_optimizer = None  # a table of logits, no torch optimizer

    @pytest.fixture
    def model(self):
        return ModelRef(uid="base", kind="base", backend="tabular", model="tabular")


@pytest.mark.parametrize("reward", [lambda r: -r, lambda r: 1.0], ids=["sign-flipped", "ignores-the-advantage"])
def test_the_direction_check_fails_a_tabular_learner_that_learns_the_wrong_way(reward, make_plugin_system, tmp_path):
    from unstable_core.components import LearnerSpec
    from unstable_core.testing.toy import TabularLearner, TabularOptions

    class Broken(TabularLearner):
        def update(self, batch):
            steps = [s.model_copy(update={"reward": reward(s.reward)}) for s in batch.steps]
            return super().update(batch.model_copy(update={"steps": steps}))

    class BrokenPlugin:
        @hookimpl
        def unstable_learners(self):
            return [LearnerSpec(name="broken", summary="broken on purpose", config=TabularOptions, factory=lambda o, ctx: Broken(o))]

    system = make_plugin_system(toy_plugin, BrokenPlugin())
    contract = type("Contract", (TestTabularLearner,), {"name": "broken"})()
    model = ModelRef(uid="base", kind="base", backend="tabular", model="tabular")
    with pytest.raises(AssertionError, match="does not raise the probability of what is rewarded"):
        contract.test_learning_goes_the_right_way(system.get("learner", "broken"), system, tmp_path, model)


def test_a_learner_declares_its_adapter_and_check_run_reads_it(make_plugin_system):
    """``LearnerSpec.adapter(options)`` is computed once by ``check_run`` and handed to every
    component's ``check_run`` as ``components.adapter``: a backend checks the shape it must serve
    without reading another plugin's options."""
    import pytest

    from unstable_core import AdapterShape, ConfigError, InferenceSpec, LearnerSpec, hookimpl
    from unstable_core.config import validate_config
    from unstable_core.config_check import check_run
    from unstable_core.testing import toy_config, toy_plugin
    from unstable_core.testing.toy import TabularOptions

    seen = []

    def small_slots(options, components):
        seen.append(components.adapter)
        if components.adapter is not None and components.adapter.rank > 4:
            raise ValueError(f"rank {components.adapter.rank} does not fit")

    class Plugin:
        @hookimpl
        def unstable_learners(self):
            tabular = toy_plugin.unstable_learners()[0]
            return [LearnerSpec(name="lora-ish", summary="Declares an adapter", config=TabularOptions, factory=tabular.factory,
                                adapter=lambda o: AdapterShape(rank=int(o.lr * 10), alpha=1.0))]

        @hookimpl
        def unstable_inference_backends(self):
            tabular = next(s for s in toy_plugin.unstable_inference_backends() if s.name == "tabular")
            return [InferenceSpec(name="slots", summary="Checks the adapter", config=tabular.config, factory=tabular.factory,
                                  check_run=small_slots)]

    system = make_plugin_system(toy_plugin, Plugin())
    cfg = toy_config(learner={"name": "lora-ish", "lr": 0.3}, inference={"name": "slots"},
                     model={"model": "tabular", "backend": "slots"})
    check_run(validate_config(cfg), system)
    assert seen == [AdapterShape(rank=3, alpha=1.0)]
    with pytest.raises(ConfigError, match="inference: rank 8 does not fit"):
        check_run(validate_config({**cfg, "learner": {"name": "lora-ish", "lr": 0.8}}), system)
    check_run(validate_config(toy_config(inference={"name": "slots"}, model={"model": "tabular", "backend": "slots"})), system)
    assert seen[-1] is None  # the toy learner declares no adapter


def test_a_tracker_declares_what_it_wants_by_value_or_by_option():
    import pytest
    from pydantic import BaseModel, ConfigDict, Field

    from unstable_core import TrackerSpec

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        games: bool = Field(False, description="every game")

    spec = TrackerSpec(name="t", summary="t", config=Options, factory=lambda o, ctx: None, game_records="games", transcripts=True)
    assert spec.wants("game_records", Options(games=True)) and not spec.wants("game_records", Options())
    assert spec.wants("transcripts", Options())
    with pytest.raises(ValueError, match="game_records names option 'gamez', which Options does not have"):
        TrackerSpec(name="t", summary="t", config=Options, factory=lambda o, ctx: None, game_records="gamez")
