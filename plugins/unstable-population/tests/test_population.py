import math
import random

import pytest

import unstable_population.plugin as plugin
from unstable_core import Checkpoint, EnvSpec, ModelRef, ModelRegistry
from unstable_core.testing import ModelSamplerContract, sample_result
from unstable_population.meta import nash_mixture, payoff_matrix
from unstable_population.samplers import FictitiousOptions, FictitiousSampler, PSROOptions, PSROSampler

ENV = EnvSpec(env_id="KuhnPoker-v0-train")


class TestFictitiousContract(ModelSamplerContract):
    plugin = plugin
    name = "fictitious"
    options = {"fixed_prob": 0.3}


class TestPSROContract(ModelSamplerContract):
    plugin = plugin
    name = "psro"
    options = {"entry_games": 0, "resolve_every": 5}


def population(n):
    reg = ModelRegistry()
    reg.add(ModelRef(uid="random-valid", model="random-valid"))
    base = ModelRef(uid="base", kind="base", backend="hf", model="m")
    reg.add(base, current=True)
    for v in range(1, n + 1):
        reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"/c/{v}"), base)
    return reg


def play(reg, a, b, wins_a, wins_b, draws=0):
    for outcome, count in (((1.0, -1.0), wins_a), ((-1.0, 1.0), wins_b), ((0.0, 0.0), draws)):
        for _ in range(count):
            reg.record_game(sample_result(seats=[reg.get(a).ref, reg.get(b).ref], rewards={0: outcome[0], 1: outcome[1]}))


def test_the_meta_solver_gives_the_known_nash_mixtures():
    # a 2x2 zero-sum game with a mixed equilibrium: the row player plays row 0 with 3/7 (value 1/7)
    assert nash_mixture([[3, -1], [-2, 1]]) == pytest.approx([3 / 7, 4 / 7], abs=1e-9)
    assert nash_mixture([[0, -1, 1], [1, 0, -1], [-1, 1, 0]]) == pytest.approx([1 / 3] * 3, abs=1e-9)  # rock-paper-scissors
    assert nash_mixture([[1, 2], [0, 3]])[0] == pytest.approx(1.0)  # row 0 dominates: a pure strategy
    assert nash_mixture([[0.0]]) == [1.0]


def test_the_payoff_matrix_is_each_pairs_mean_result_from_the_leagues_counts():
    reg = population(2)
    play(reg, "ckpt-1", "ckpt-2", wins_a=3, wins_b=1)
    play(reg, "base", "ckpt-2", wins_a=0, wins_b=2, draws=2)
    m = payoff_matrix(["base", "ckpt-1", "ckpt-2"], reg)
    assert m[1][2] == pytest.approx(0.5) and m[2][1] == pytest.approx(-0.5)
    assert m[0][2] == pytest.approx(-0.5) and m[0][1] == 0.0 and m[0][0] == 0.0


def within_4_se(counts, n, expected):
    for key, p in expected.items():
        se = math.sqrt(p * (1 - p) / n)
        assert abs(counts.get(key, 0) / n - p) < 4 * se, (key, counts.get(key, 0) / n, p)


def test_fictitious_draws_uniformly_over_the_whole_history():
    reg = population(5)  # the base model and 5 checkpoints
    sampler = FictitiousSampler(FictitiousOptions())
    rng = random.Random(0)
    counts: dict[str, int] = {}
    n = 12_000
    for _ in range(n // 2):
        for ref in sampler.sample(ENV, reg.current, 2, reg, rng):
            counts[ref.uid] = counts.get(ref.uid, 0) + 1
    within_4_se(counts, n, {uid: 1 / 6 for uid in ["base"] + [f"ckpt-{v}" for v in range(1, 6)]})
    linear = FictitiousSampler(FictitiousOptions(weighting="linear", fixed_prob=0.25))
    counts = {}
    for _ in range(n):
        ref = linear.sample(ENV, reg.current, 1, reg, rng)[0]
        counts[ref.uid] = counts.get(ref.uid, 0) + 1
    within_4_se(counts, n, {"random-valid": 0.25, "base": 0.75 / 21, "ckpt-5": 0.75 * 6 / 21})


def test_psro_draws_from_the_nash_mixture_of_the_population():
    """Three checkpoints that beat each other in a cycle (rock-paper-scissors) and a base model
    every one of them beats: the mixture is a third each, the base model never drawn."""
    reg = population(3)
    for a, b in (("ckpt-1", "ckpt-2"), ("ckpt-2", "ckpt-3"), ("ckpt-3", "ckpt-1")):
        play(reg, a, b, wins_a=0, wins_b=20)  # each is beaten by the next: a cycle
    for v in (1, 2, 3):
        play(reg, f"ckpt-{v}", "base", wins_a=20, wins_b=0)
    sampler = PSROSampler(PSROOptions(entry_games=10, resolve_every=1_000_000, explore=0.0))
    rng = random.Random(1)
    n = 9_000
    counts: dict[str, int] = {}
    for _ in range(n):
        ref = sampler.sample(ENV, reg.current, 1, reg, rng)[0]
        counts[ref.uid] = counts.get(ref.uid, 0) + 1
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}, abs=1e-9)
    within_4_se(counts, n, {"ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3})
    assert "base" not in counts


def test_psro_re_solves_every_n_games_and_lets_newcomers_in_after_their_entry_games():
    reg = population(2)
    play(reg, "ckpt-1", "ckpt-2", wins_a=0, wins_b=10)  # ckpt-2 beats ckpt-1: a pure mixture on ckpt-2
    sampler = PSROSampler(PSROOptions(entry_games=10, resolve_every=30, explore=0.5))
    rng = random.Random(2)
    sampler.sample(ENV, reg.current, 1, reg, rng)
    assert sampler.mixture() == pytest.approx({"ckpt-1": 0.0, "ckpt-2": 1.0})
    reg.add_checkpoint(Checkpoint(uid="ckpt-3", version=3, path="/c/3"), reg.get("base").ref)
    drawn = {sampler.sample(ENV, reg.current, 1, reg, rng)[0].uid for _ in range(200)}
    assert drawn == {"base", "ckpt-2", "ckpt-3"}  # the members, and the two below entry_games explored
    assert "ckpt-3" not in sampler.mixture()
    play(reg, "ckpt-3", "ckpt-2", wins_a=15, wins_b=0)  # 30 more games recorded: re-solved, ckpt-3 enters
    sampler.sample(ENV, reg.current, 1, reg, rng)
    assert sampler.mixture()["ckpt-3"] == pytest.approx(1.0)


def test_psro_state_round_trips_and_continues_the_same_draws():
    reg = population(3)
    play(reg, "ckpt-1", "ckpt-2", wins_a=5, wins_b=5)
    first = PSROSampler(PSROOptions(entry_games=0, resolve_every=10_000))
    first.sample(ENV, reg.current, 1, reg, random.Random(3))
    second = PSROSampler(PSROOptions(entry_games=0, resolve_every=10_000))
    second.load_state_dict(first.state_dict())
    a, b = random.Random(4), random.Random(4)
    assert [first.sample(ENV, reg.current, 2, reg, a) for _ in range(50)] == [second.sample(ENV, reg.current, 2, reg, b) for _ in range(50)]


@pytest.mark.parametrize("sampler", [{"name": "fictitious"}, {"name": "psro", "entry_games": 4, "resolve_every": 20}])
def test_a_training_run_plays_its_population(sampler, tmp_path):
    """The toy learner trains against past checkpoints drawn by the sampler: at the end the
    registry shows games between the current policy and older checkpoints."""
    import json

    import unstable_core
    from unstable_core.testing import toy_config, toy_plugin

    system = unstable_core.load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("population", plugin)])
    cfg = toy_config(model_sampler=sampler, train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
                     training={"learning_steps": 8, "batch_size": 16, "save_every": 1, "eval_every": 0},
                     collection={"mode": "sync", "num_train_games": 8, "eval_games": 8}, trackers=[])
    result = unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    assert result.status == "completed" and result.learner_steps == 8
    registry = json.loads((tmp_path / "r" / "registry.json").read_text())
    opponents = {uid for pair in registry["pairs"] for uid in (pair["a"], pair["b"])}
    assert len({u for u in opponents if u.startswith("ckpt-")}) >= 4  # many generations met, not only the latest


@pytest.mark.parametrize("sampler", [{"name": "fictitious"}, {"name": "psro", "entry_games": 4, "resolve_every": 20}])
def test_a_killed_and_resumed_sync_run_draws_the_same_opponents(sampler, tmp_path):
    """SIGKILLed twice at random points and resumed from its snapshots, a sync run seats the same
    opponents in every training game as the run that was never killed (the sampler's state and
    the league's stream both restored)."""
    import json

    import unstable_core
    from unstable_core.testing import run_with_kills, toy_config, toy_plugin

    cfg = toy_config(model_sampler=sampler, train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
                     training={"learning_steps": 24, "batch_size": 16, "save_every": 2, "eval_every": 0},
                     collection={"mode": "sync", "num_train_games": 8, "eval_games": 8, "transcripts": 1.0}, trackers=[])

    def seats(run_dir):
        return [(g["game_idx"], [s["uid"] for s in g["seats"]]) for g in map(json.loads, (run_dir / "games" / "train.jsonl").open())]

    unstable_core.run(cfg, run_dir=tmp_path / "whole", plugins=unstable_core.load_plugins(extra=[("toy", toy_plugin)]))
    landed = run_with_kills(tmp_path / "killed", cfg, random.Random(7), kills=2, most_events=300,
                            plugins=["unstable_core.testing:toy_plugin"])
    assert landed >= 1
    whole = seats(tmp_path / "whole")
    assert len({uid for _, uids in whole for uid in uids if uid.startswith("ckpt-")}) >= 4
    assert seats(tmp_path / "killed") == whole
