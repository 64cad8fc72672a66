"""psro's ``meta_solver = "least"``: opponents drawn from the members' least exploitable mixture,
which the run computes (``registry.least_exploitable``) after each checkpoint's exact payoffs;
and ``output = "least"``: that mixture is the population's policy, opponents still from the Nash one."""

import random

import pytest

import unstable_population.plugin as plugin
from unstable_core import Checkpoint, EnvSpec, ModelRef, ModelRegistry
from unstable_population.samplers import PSROOptions, PSROSampler

ENV = EnvSpec(env_id="openspiel/kuhn_poker")
LEAST = PSROOptions(payoff="exact", meta_solver="least", explore=0.0)


def cycle():
    """base and three checkpoints whose exact payoffs form rock-paper-scissors (base loses to all)."""
    reg = ModelRegistry()
    base = ModelRef(uid="base", kind="base", backend="hf", model="m")
    reg.add(base, current=True)
    for v in (1, 2, 3):
        reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"/c/{v}"), base)
    for a, b in (("ckpt-1", "ckpt-2"), ("ckpt-2", "ckpt-3"), ("ckpt-3", "ckpt-1")):
        reg.record_payoff(a, b, -1.0)
    for v in (1, 2, 3):
        reg.record_payoff(f"ckpt-{v}", "base", 1.0)
    return reg


def test_the_sampler_names_its_members_until_their_least_mixture_is_computed_then_draws_from_it():
    reg = cycle()
    sampler = PSROSampler(LEAST)
    members = ["base", "ckpt-1", "ckpt-2", "ckpt-3"]
    assert sampler.least_exploitable_members(reg) == members
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    # none computed and no earlier mixture: the meta-game's Nash mixture meanwhile
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}, abs=1e-9)
    least = [0.0, 0.5, 0.25, 0.25]  # not the meta-game's Nash: the sampler takes what the run computed
    reg.record_least_exploitable(members, least)
    assert sampler.least_exploitable_members(reg) == []  # computed: nothing to ask for
    drawn = [sampler.sample(ENV, reg.current, 1, reg, random.Random(seed))[0].uid for seed in range(2000)]
    assert sampler.mixture() == dict(zip(members, least, strict=True))
    assert drawn.count("base") == 0 and 0.45 < drawn.count("ckpt-1") / len(drawn) < 0.55


def test_a_new_member_keeps_the_last_least_mixture_until_its_own_is_computed():
    reg = cycle()
    sampler = PSROSampler(LEAST)
    members = ["base", "ckpt-1", "ckpt-2", "ckpt-3"]
    reg.record_least_exploitable(members, [0.0, 0.2, 0.3, 0.5])
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    reg.add_checkpoint(Checkpoint(uid="ckpt-4", version=4, path="/c/4"), reg.get("base").ref)
    for other in members:
        reg.record_payoff("ckpt-4", other, 0.5)
    assert sampler.least_exploitable_members(reg) == [*members, "ckpt-4"]
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    assert sampler.mixture() == dict(zip(members, [0.0, 0.2, 0.3, 0.5], strict=True))  # the last one, not the Nash
    reg.record_least_exploitable([*members, "ckpt-4"], [0.0, 0.0, 0.0, 0.4, 0.6])
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    assert sampler.mixture() == {"base": 0.0, "ckpt-1": 0.0, "ckpt-2": 0.0, "ckpt-3": 0.4, "ckpt-4": 0.6}


def test_phase_keeps_the_least_mixture_to_the_phases_members():
    reg = cycle()
    sampler = PSROSampler(PSROOptions(payoff="exact", meta_solver="least", phase=2))
    assert sampler.least_exploitable_members(reg) == ["base", "ckpt-2"]


def test_the_registry_keeps_the_least_mixture_through_its_state_and_only_for_its_members():
    reg = cycle()
    reg.record_least_exploitable(["base", "ckpt-1"], [0.25, 0.75])
    again = ModelRegistry()
    again.load_state_dict(reg.state_dict())
    assert again.least_exploitable(["base", "ckpt-1"]) == [0.25, 0.75]
    assert again.least_exploitable(["base", "ckpt-1", "ckpt-2"]) is None and again.least_exploitable(["ckpt-1", "base"]) is None
    state = reg.state_dict()
    del state["least"]  # a state saved before least mixtures were kept
    older = ModelRegistry()
    older.load_state_dict(state)
    assert older.least_exploitable(["base", "ckpt-1"]) is None


def test_a_resumed_sampler_draws_what_the_uninterrupted_one_draws():
    reg = cycle()
    reg.record_least_exploitable(["base", "ckpt-1", "ckpt-2", "ckpt-3"], [0.1, 0.2, 0.3, 0.4])
    first = PSROSampler(LEAST)
    first.sample(ENV, reg.current, 1, reg, random.Random(1))
    registry = ModelRegistry()
    registry.load_state_dict(reg.state_dict())
    second = PSROSampler(LEAST)
    second.load_state_dict(first.state_dict())
    a, b = random.Random(5), random.Random(5)
    assert [first.sample(ENV, reg.current, 2, reg, a) for _ in range(50)] == \
        [second.sample(ENV, registry.current, 2, registry, b) for _ in range(50)]


def test_output_least_reports_the_least_mixture_while_opponents_come_from_the_nash_one():
    reg = cycle()
    sampler = PSROSampler(PSROOptions(payoff="exact", output="least", explore=0.0))
    members = ["base", "ckpt-1", "ckpt-2", "ckpt-3"]
    assert plugin.unstable_model_samplers()[1].least_exploitable(sampler.options)
    assert sampler.least_exploitable_members(reg) == members
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    nash = {"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}
    assert sampler.mixture() == pytest.approx(nash, abs=1e-9)  # none computed yet: the Nash mixture meanwhile
    least = [0.0, 0.7, 0.3, 0.0]
    reg.record_least_exploitable(members, least)
    assert sampler.least_exploitable_members(reg) == []
    drawn = [sampler.sample(ENV, reg.current, 1, reg, random.Random(seed))[0].uid for seed in range(3000)]
    assert sampler.mixture() == dict(zip(members, least, strict=True))
    # the draws stay the meta-game's Nash mixture: ckpt-3, which the least mixture leaves out, a third of them
    assert drawn.count("base") == 0 and 0.30 < drawn.count("ckpt-3") / len(drawn) < 0.37
    # a new member: the last least mixture is reported until the run computes the new one
    reg.add_checkpoint(Checkpoint(uid="ckpt-4", version=4, path="/c/4"), reg.get("base").ref)
    for other in members:
        reg.record_payoff("ckpt-4", other, -0.5)
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    assert sampler.members == [*members, "ckpt-4"] and sampler.mixture() == dict(zip(members, least, strict=True))
    resumed = PSROSampler(sampler.options)
    resumed.load_state_dict(sampler.state_dict())
    assert resumed.mixture() == sampler.mixture()


def test_without_output_least_the_run_computes_no_least_mixture():
    sampler = PSROSampler(PSROOptions(payoff="exact"))
    assert sampler.least_exploitable_members(cycle()) == []
    assert not plugin.unstable_model_samplers()[1].least_exploitable(sampler.options)


@pytest.mark.parametrize(("options", "message"), [
    ({"meta_solver": "least"}, "meta_solver = 'least' needs payoff = 'exact'"),
    ({"output": "least"}, "output = 'least' needs payoff = 'exact'"),
    ({"meta_solver": "least", "payoff": "exact", "spread": 0.5}, "spread applies to the Nash mixture only"),
])
def test_the_least_meta_solver_refuses_options_it_cannot_honour(options, message):
    with pytest.raises(ValueError, match=message):
        PSROOptions(**options)


def test_the_config_check_names_what_a_least_mixture_needs(tmp_path):
    """On the toy game (no exact figures, no scoring backend) and with two training envs: one line
    a problem, naming the sampler."""
    import unstable_core
    from unstable_core import ConfigError
    from unstable_core.testing import toy_config, toy_plugin

    system = unstable_core.load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("population", plugin)])
    two = [{"env_id": "PickBest-v0", "num_players": 2}, {"env_id": "PickBest-v0", "num_players": 2, "template": "chat"}]
    cfg = toy_config(model_sampler={"name": "psro", "payoff": "exact", "meta_solver": "least"}, train_envs=two)
    with pytest.raises(ConfigError) as caught:
        unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system)
    text = str(caught.value)
    assert "model_sampler (psro) reads the least exploitable mixture of checkpoints on one game: train_envs has 2" in text
    assert "env provider 'toy' of PickBest-v0 computes none" in text
