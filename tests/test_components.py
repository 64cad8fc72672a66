"""Built-in samplers, buffers, registry and the conformance kit run on every built-in component."""

import random
from collections import Counter

import pytest

from unstable_core.builtin import buffers, samplers
from unstable_core.runtime.registry import ModelRegistry
from unstable_core.runtime.rewards import RewardPipelines
from unstable_core.testing import (
    BufferContract, EnvProviderContract, InferenceContract, ModelSamplerContract, RaterContract,
    RewardTransformContract, TemplateContract, TrackerContract, EnvSamplerContract, sample_result,
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
                                   "penalty-for-invalid-move", "normalize", "normalize-by-env"])
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
    b = buffers.StepBuffer(buffers.BufferOptions(capacity=6), rp, random.Random(0))
    for i in range(5):
        assert b.add(sample_result(train_seats=[0, 1])) == 2
    assert b.size() == 6 and b.evicted == 4
    batch = b.draw(4, learner_version=3)
    assert len(batch.steps) == 4 and batch.learner_version == 3 and b.size() == 2
    assert sorted({s.reward for s in batch.steps}) <= [-10.0, 10.0]
    assert len(b.draw(10, 3).steps) == 2 and b.size() == 0


def test_buffer_skips_failed_games():
    b = buffers.StepBuffer(buffers.BufferOptions(), RewardPipelines(), random.Random(0))
    r = sample_result()
    r.outcome = "failed"
    assert b.add(r) == 0


def test_episode_buffer_keeps_episodes_whole():
    b = buffers.EpisodeBuffer(buffers.BufferOptions(capacity=100), RewardPipelines(), random.Random(0))
    for _ in range(3):
        b.add(sample_result(train_seats=[0, 1]))
    batch = b.draw(3, 0)
    assert len(batch.steps) == 3 or len(batch.steps) == 4
    assert b.size() == 6 - len(batch.steps)


def test_sampling_transforms_apply_on_draw():
    seen = []
    rp = RewardPipelines(sampling=[lambda steps: seen.append(len(steps)) or steps])
    b = buffers.StepBuffer(buffers.BufferOptions(), rp, random.Random(0))
    b.add(sample_result(train_seats=[0, 1]))
    b.draw(2, 0)
    assert seen == [2]


def test_registry_counts_pairs_and_snapshot(tmp_path):
    reg = registry_with_checkpoints(1)
    a, g = reg.current, reg.get("greedy").ref
    reg.record_game(sample_result(seats=[a, g], rewards={0: 1, 1: -1}))
    reg.record_game(sample_result(seats=[g, a], rewards={0: 0, 1: 0}))
    e = reg.get("ckpt-1")
    assert (e.games, e.wins, e.draws, e.losses) == (2, 1, 1, 0)
    assert reg.match_count("greedy", "ckpt-1") == 2
    pair = reg.pairs[reg.pair_key("ckpt-1", "greedy")]
    assert pair == {"games": 2, "draws": 1, "ckpt-1": 1, "greedy": 0}
    reg.write(tmp_path / "r.json")
    import json

    snap = json.loads((tmp_path / "r.json").read_text())
    assert snap["current"] == "ckpt-1" and {m["uid"] for m in snap["models"]} >= {"base", "ckpt-1", "greedy"}
    assert not list(tmp_path.glob(".r.json*"))  # no temp file left behind
    assert [r.uid for r in reg.checkpoints()] == ["base", "ckpt-1"]
    with pytest.raises(ValueError):
        reg.add(ModelRef(uid="greedy"))
