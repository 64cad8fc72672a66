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


def test_a_floor_keeps_every_row_in_the_mixture_at_its_best_under_the_floor():
    # row 0 dominates; with floor 0.5 each of the 2 rows has at least 0.25: row 0 gets the rest
    assert nash_mixture([[1, 2], [0, 3]], floor=0.5) == pytest.approx([0.75, 0.25], abs=1e-9)
    assert nash_mixture([[1, 2], [0, 3]], floor=1.0) == pytest.approx([0.5, 0.5], abs=1e-9)  # uniform
    assert nash_mixture([[3, -1], [-2, 1]], floor=0.5) == pytest.approx([3 / 7, 4 / 7], abs=1e-9)  # above it already


def test_the_payoff_matrix_is_each_pairs_mean_result_from_the_leagues_counts():
    reg = population(2)
    play(reg, "ckpt-1", "ckpt-2", wins_a=3, wins_b=1)
    play(reg, "base", "ckpt-2", wins_a=0, wins_b=2, draws=2)
    m = payoff_matrix(["base", "ckpt-1", "ckpt-2"], reg, "outcome")
    assert m[1][2] == pytest.approx(0.5) and m[2][1] == pytest.approx(-0.5)
    assert m[0][2] == pytest.approx(-0.5) and m[0][1] == 0.0 and m[0][0] == 0.0
    assert payoff_matrix(["base", "ckpt-1", "ckpt-2"], reg) == m  # rewards of +-1: the same game


def test_the_reward_meta_game_weighs_what_was_won_not_how_often():
    """ckpt-1 wins 3 games of 1 chip against ckpt-2 and loses one of 6 chips: it wins more
    often, yet its mean reward is negative; the reward meta-game picks ckpt-2, the outcome one ckpt-1."""
    reg = population(2)
    a, b = reg.get("ckpt-1").ref, reg.get("ckpt-2").ref
    for ra in (1.0, 1.0, 1.0, -6.0):
        reg.record_game(sample_result(seats=[a, b], rewards={0: ra, 1: -ra}))
    assert payoff_matrix(["ckpt-1", "ckpt-2"], reg) == [[0.0, pytest.approx(-0.75)], [pytest.approx(0.75), 0.0]]
    assert payoff_matrix(["ckpt-1", "ckpt-2"], reg, "outcome") == [[0.0, pytest.approx(0.5)], [pytest.approx(-0.5), 0.0]]
    for payoff, pick in (("reward", "ckpt-2"), ("outcome", "ckpt-1")):
        sampler = PSROSampler(PSROOptions(entry_games=1, explore=0.0, payoff=payoff, pair_games=4))  # the base model played none
        sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
        assert sampler.mixture()[pick] == pytest.approx(1.0)


def within_4_se(counts, n, expected):
    for key, p in expected.items():
        se = math.sqrt(p * (1 - p) / n)
        assert abs(counts.get(key, 0) / n - p) < 4 * se, (key, counts.get(key, 0) / n, p)


def draw_counts(sampler, reg, n, seed, seats=1):
    """How often each model is drawn in n seats (n / seats calls of ``sample``)."""
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    for _ in range(n // seats):
        for ref in sampler.sample(ENV, reg.current, seats, reg, rng):
            counts[ref.uid] = counts.get(ref.uid, 0) + 1
    return counts


def test_fictitious_draws_uniformly_over_the_whole_history():
    reg = population(5)  # the base model and 5 checkpoints
    n = 12_000
    counts = draw_counts(FictitiousSampler(FictitiousOptions()), reg, n, seed=0, seats=2)
    within_4_se(counts, n, {uid: 1 / 6 for uid in ["base"] + [f"ckpt-{v}" for v in range(1, 6)]})
    linear = FictitiousSampler(FictitiousOptions(weighting="linear", fixed_prob=0.25))
    counts = draw_counts(linear, reg, n, seed=1)
    within_4_se(counts, n, {"random-valid": 0.25, "base": 0.75 / 21, "ckpt-5": 0.75 * 6 / 21})


def test_with_phases_only_every_phase_th_checkpoint_joins_fictitious_play_s_population():
    """phase = 2: the base model, ckpt-2 and ckpt-4 are the population (drawn alike, and the
    mixture the sampler reports); ckpt-1, -3 and -5 are never drawn. The members survive a
    state round trip."""
    reg = population(5)
    sampler = FictitiousSampler(FictitiousOptions(phase=2))
    n = 9_000
    counts = draw_counts(sampler, reg, n, seed=3)
    within_4_se(counts, n, {"base": 1 / 3, "ckpt-2": 1 / 3, "ckpt-4": 1 / 3})
    assert set(counts) == {"base", "ckpt-2", "ckpt-4"}
    assert sampler.mixture() == pytest.approx({"base": 1 / 3, "ckpt-2": 1 / 3, "ckpt-4": 1 / 3})
    restored = FictitiousSampler(FictitiousOptions(phase=2))
    restored.load_state_dict(sampler.state_dict())
    assert restored.mixture() == sampler.mixture()
    linear = FictitiousSampler(FictitiousOptions(phase=2, weighting="linear"))
    linear.sample(ENV, reg.current, 1, reg, random.Random(0))
    assert linear.mixture() == pytest.approx({"base": 1 / 6, "ckpt-2": 2 / 6, "ckpt-4": 3 / 6})


def test_with_phases_psro_s_meta_game_is_played_among_every_phase_th_checkpoint():
    """phase = 2 with exact payoffs: ckpt-1 and ckpt-3 beat everyone, yet they are not members,
    so the meta-game over base, ckpt-2 and ckpt-4 (each beating the ones before) is pure on
    ckpt-4, and no draw, exploring or not, seats them; ckpt-6, the next member, is explored
    before its payoffs come, ckpt-5 never."""
    reg = population(4)
    for v in (1, 2, 3, 4):
        for w in range(v):
            reg.record_payoff(f"ckpt-{v}", f"ckpt-{w}" if w else "base", 1.0)  # each beats every earlier one
    for v in (1, 3):
        reg.record_payoff(f"ckpt-{v}", "ckpt-4", 1.0)  # and ckpt-1, ckpt-3 beat ckpt-4 too
    sampler = PSROSampler(PSROOptions(payoff="exact", explore=0.5, phase=2))
    rng = random.Random(0)
    drawn = {sampler.sample(ENV, reg.current, 1, reg, rng)[0].uid for _ in range(200)}
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-2": 0.0, "ckpt-4": 1.0}, abs=1e-9)
    assert drawn == {"ckpt-4"}
    for v in (5, 6):
        reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"/c/{v}"), reg.get("base").ref)
    drawn = {sampler.sample(ENV, reg.current, 1, reg, rng)[0].uid for _ in range(200)}
    assert drawn == {"ckpt-4", "ckpt-6"}  # ckpt-6 explored: a member whose payoffs are not in yet


def cycle_over_base():
    """Three checkpoints that beat each other in a cycle (rock-paper-scissors), each beating the
    base model."""
    reg = population(3)
    for a, b in (("ckpt-1", "ckpt-2"), ("ckpt-2", "ckpt-3"), ("ckpt-3", "ckpt-1")):
        play(reg, a, b, wins_a=0, wins_b=20)  # each is beaten by the next: a cycle
    for v in (1, 2, 3):
        play(reg, f"ckpt-{v}", "base", wins_a=20, wins_b=0)
    return reg


def test_psro_draws_from_the_nash_mixture_of_the_population():
    """The rock-paper-scissors cycle over a base model every one of them beats: the mixture is
    a third each, the base model never drawn."""
    reg = cycle_over_base()
    sampler = PSROSampler(PSROOptions(entry_games=10, resolve_every=1_000_000, explore=0.0))
    n = 9_000
    counts = draw_counts(sampler, reg, n, seed=1)
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}, abs=1e-9)
    within_4_se(counts, n, {"ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3})
    assert "base" not in counts


def test_psro_with_spread_draws_every_member_yet_keeps_the_nash_mixture():
    """spread = 0.4 over four members: each drawn at least 0.1 of the time. The base model gets
    that floor and the cycle the rest alike (the only mixture whose worst column, -0.1, is the
    average of the cycle's three columns); the meta mixture stays the Nash one."""
    reg = cycle_over_base()
    sampler = PSROSampler(PSROOptions(entry_games=10, resolve_every=1_000_000, explore=0.0, spread=0.4))
    n = 9_000
    counts = draw_counts(sampler, reg, n, seed=5)
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}, abs=1e-9)
    within_4_se(counts, n, {"base": 0.1, "ckpt-1": 0.3, "ckpt-2": 0.3, "ckpt-3": 0.3})
    restored = PSROSampler(PSROOptions(entry_games=10, resolve_every=1_000_000, explore=0.0, spread=0.4))
    restored.load_state_dict(sampler.state_dict())
    assert restored.draws == pytest.approx([0.1, 0.3, 0.3, 0.3], abs=1e-9)


def test_psro_re_solves_every_n_games_and_lets_newcomers_in_after_their_entry_games():
    reg = population(2)
    play(reg, "ckpt-1", "ckpt-2", wins_a=0, wins_b=10)  # ckpt-2 beats ckpt-1: a pure mixture on ckpt-2
    sampler = PSROSampler(PSROOptions(entry_games=10, resolve_every=30, explore=0.5))
    rng = random.Random(2)
    sampler.sample(ENV, reg.current, 1, reg, rng)
    assert sampler.mixture() == pytest.approx({"ckpt-1": 0.0, "ckpt-2": 1.0})
    reg.add_checkpoint(Checkpoint(uid="ckpt-3", version=3, path="/c/3"), reg.get("base").ref)
    drawn = {sampler.sample(ENV, reg.current, 1, reg, rng)[0].uid for _ in range(200)}
    # the pair ckpt-3, current, has not played with the mixture's support (ckpt-2; its pairs with
    # ckpt-1 and base come after), and the two checkpoints below entry_games explored (base, ckpt-3)
    assert drawn == {"base", "ckpt-2", "ckpt-3"}
    assert "ckpt-3" not in sampler.mixture()
    play(reg, "ckpt-3", "ckpt-2", wins_a=15, wins_b=0)  # 30 more games recorded: re-solved, ckpt-3 has its entry games
    sampler.sample(ENV, reg.current, 1, reg, rng)
    assert "ckpt-3" not in sampler.mixture()  # ... but has not played ckpt-1, a member: its row is not known yet
    play(reg, "ckpt-3", "ckpt-1", wins_a=15, wins_b=0)  # 30 more: it enters, beating both
    sampler.sample(ENV, reg.current, 1, reg, rng)
    assert sampler.mixture()["ckpt-3"] == pytest.approx(1.0)


def test_psro_with_exact_payoffs_solves_the_computed_meta_game_without_games():
    """payoff = "exact": the checkpoints whose exact payoffs the run has recorded form the
    meta-game (no games needed: rock-paper-scissors gives a third each); one whose payoffs come
    later enters at once, and the meta-game is re-solved then."""
    reg = population(3)
    for a, b in (("ckpt-1", "ckpt-2"), ("ckpt-2", "ckpt-3"), ("ckpt-3", "ckpt-1")):
        reg.record_payoff(a, b, -1.0)  # each loses to the next: a cycle
    for v in (1, 2, 3):
        reg.record_payoff(f"ckpt-{v}", "base", 1.0)
    sampler = PSROSampler(PSROOptions(payoff="exact", explore=0.0))
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}, abs=1e-9)
    reg.add_checkpoint(Checkpoint(uid="ckpt-4", version=4, path="/c/4"), reg.get("base").ref)
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    assert "ckpt-4" not in sampler.mixture()  # not computed yet
    for other in ("base", "ckpt-1", "ckpt-2", "ckpt-3"):
        reg.record_payoff("ckpt-4", other, 1.0)  # it beats everyone
    sampler.sample(ENV, reg.current, 1, reg, random.Random(0))
    assert sampler.mixture()["ckpt-4"] == pytest.approx(1.0)


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


@pytest.mark.parametrize("sampler", [{"name": "fictitious"}, {"name": "psro", "entry_games": 4, "resolve_every": 20},
                                     {"name": "fictitious", "phase": 2}])
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


def test_the_league_offers_the_uniform_and_the_meta_mixture_for_evaluation(tmp_path):
    """`collection.eval_mixtures`: the league hands the evaluator every checkpoint alike and the
    mixture the sampler targets (psro's Nash mixture; fictitious's population, here with
    phase = 2), as models with weights; a sampler without a mixture (mirror) gives none."""
    import asyncio

    import unstable_core
    from unstable_core.executors import build_role
    from unstable_core.testing import toy_config, toy_plugin

    system = unstable_core.load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("population", plugin)])
    third = {"ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}  # the cycle's Nash mixture (base: weight 0, left out)
    for sampler, expected in (({"name": "psro", "entry_games": 10, "explore": 0.0}, third),
                              ({"name": "fictitious", "phase": 2}, {"base": 0.5, "ckpt-2": 0.5}),
                              ({"name": "mirror"}, None)):
        cfg = toy_config(model_sampler=sampler, trackers=[])
        league = build_role("league", unstable_core.build(cfg, run_dir=tmp_path / sampler["name"], plugins=system).plan, system)
        base = league.registry.get("base").ref
        for v in (1, 2, 3):
            league.registry.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"/c/{v}"), base)
        for a, b in (("ckpt-1", "ckpt-2"), ("ckpt-2", "ckpt-3"), ("ckpt-3", "ckpt-1")):
            play(league.registry, a, b, wins_a=0, wins_b=20)  # a cycle: a third each
        league.model_sampler.sample(ENV, league.registry.current, 1, league.registry, random.Random(0))
        mixtures = asyncio.run(league.mixtures(["uniform", "meta"]))
        assert set(mixtures) == ({"uniform"} if expected is None else {"uniform", "meta"})
        assert [(ref.uid, w) for ref, w in mixtures["uniform"]] == [(uid, 0.25) for uid in ("base", "ckpt-1", "ckpt-2", "ckpt-3")]
        if expected is not None:
            meta = {ref.uid: w for ref, w in mixtures["meta"]}
            assert meta == pytest.approx(expected, abs=1e-9)
            assert all(ref.adapter_path == f"/c/{ref.version}" for ref, _ in mixtures["meta"] if ref.uid != "base")
            assert set(asyncio.run(league.mixtures(["uniform"]))) == {"uniform"}


def tournament_versions(run_dir, mixture, tmp_path, games, system):
    """A tournament of the `mixture` model of ``run_dir`` against random-valid: the policy version
    of the checkpoint that played each of the mixture's turns, a list a game."""
    import json

    import unstable_core

    cfg = {"name": f"mix-{mixture}", "seed": 3, "env": {"name": "toy"},
           "train_envs": [{"env_id": "PickBest-v0", "num_players": 2}],
           "opponents": [{"uid": "mix", "backend": "mixture", "model": str(run_dir), "options": {"mixture": mixture}}, "random-valid"],
           "model_sampler": {"name": "fixed"}, "collection": {"tournament_games": games, "num_train_games": 32, "transcripts": 1.0},
           "trackers": []}
    result = unstable_core.run(cfg, run_dir=tmp_path / f"t-{mixture}", plugins=system)
    assert result.status == "completed"
    out = []
    for game in map(json.loads, (tmp_path / f"t-{mixture}" / "games" / "tournament.jsonl").open()):
        seats = [s["uid"] for s in game["seats"]]
        versions = [t["policy_version"] for t in game["turns"] if seats[t["player_id"]] == "mix"]
        if versions:
            out.append(versions)
    return out


def test_a_runs_population_plays_as_one_model_drawing_a_checkpoint_per_game(tmp_path):
    """The `mixture` backend: each game, the model of a run's mixture is one of its checkpoints,
    drawn with the mixture's weights (uniform: every checkpoint and the base model alike; meta:
    psro's mixture from registry.json), served by the run's own backend."""
    import json

    import unstable_core
    from unstable_core.testing import toy_config, toy_plugin

    system = unstable_core.load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("population", plugin)])
    cfg = toy_config(model_sampler={"name": "psro", "entry_games": 4, "resolve_every": 20},
                     training={"learning_steps": 4, "batch_size": 16, "save_every": 1, "eval_every": 0},
                     collection={"mode": "sync", "num_train_games": 8, "eval_games": 8}, trackers=[])
    unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    played = tournament_versions(tmp_path / "r", "uniform", tmp_path, 1500, system)
    assert all(len(set(v)) == 1 for v in played)  # one checkpoint a game
    counts: dict[int, int] = {}
    for versions in played:
        counts[versions[0]] = counts.get(versions[0], 0) + 1
    within_4_se(counts, len(played), {v: 1 / 5 for v in range(5)})  # base (version 0) and ckpt-1..4
    registry = json.loads((tmp_path / "r" / "registry.json").read_text())
    assert registry["mixture"] and sum(registry["mixture"].values()) == pytest.approx(1.0)  # psro's, as it ended
    meta = {"base": 0.1, "ckpt-1": 0.0, "ckpt-2": 0.6, "ckpt-4": 0.3}  # a mixture that tells the draws apart
    (tmp_path / "r" / "registry.json").write_text(json.dumps({**registry, "mixture": meta}))
    played = tournament_versions(tmp_path / "r", "meta", tmp_path, 1500, system)
    counts = {}
    for versions in played:
        counts[versions[0]] = counts.get(versions[0], 0) + 1
    assert set(counts) == {0, 2, 4}
    within_4_se(counts, len(played), {0: 0.1, 2: 0.6, 4: 0.3})


def test_exact_payoffs_need_an_exact_game_and_a_scoring_backend(tmp_path):
    """psro's payoff = "exact" on the toy game (its provider computes no exact figures, its
    backend scores no completions): one line a problem from the config check, naming the sampler."""
    import unstable_core
    from unstable_core import ConfigError
    from unstable_core.testing import toy_config, toy_plugin

    system = unstable_core.load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("population", plugin)])
    with pytest.raises(ConfigError) as caught:
        unstable_core.build(toy_config(model_sampler={"name": "psro", "payoff": "exact"}), run_dir=tmp_path / "r", plugins=system)
    text = str(caught.value)
    assert "model_sampler (psro) reads exact payoffs between checkpoints: env provider 'toy' of PickBest-v0 computes none" in text
    assert "inference 'tabular' scores no completions" in text


def test_a_mixture_the_run_does_not_have_is_refused_naming_the_run(tmp_path):
    """A run whose sampler keeps no meta mixture (`mirror`), or a folder that is no run: one line
    from the config check, naming the model and what is missing, before any game."""
    import unstable_core
    from unstable_core import ConfigError
    from unstable_core.testing import toy_config, toy_plugin

    system = unstable_core.load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("population", plugin)])
    cfg = toy_config(training={"learning_steps": 2, "batch_size": 16, "save_every": 1, "eval_every": 0}, trackers=[])
    unstable_core.run(cfg, run_dir=tmp_path / "mirror", plugins=system)
    for model, mixture, message in ((tmp_path / "mirror", "meta", "registry.json holds no meta mixture"),
                                    (tmp_path / "nowhere", "uniform", "a run directory with checkpoints")):
        bad = {"name": "bad", "env": {"name": "toy"}, "train_envs": [{"env_id": "PickBest-v0", "num_players": 2}],
               "opponents": [{"uid": "mix", "backend": "mixture", "model": str(model), "options": {"mixture": mixture}}, "random-valid"],
               "model_sampler": {"name": "fixed"}, "trackers": []}
        with pytest.raises(ConfigError, match=message):
            unstable_core.build(bad, run_dir=tmp_path / f"bad-{mixture}", plugins=system)


def cycle_payoff(a, b):
    """Rock-paper-scissors among ckpt-1..3 (ckpt-2 beats ckpt-1, ckpt-3 ckpt-2, ckpt-1 ckpt-3),
    each beating the base model: a's reward against b."""
    if a == b:
        return 0.0
    if "base" in (a, b):
        return -1.0 if a == "base" else 1.0
    beats = {("ckpt-2", "ckpt-1"), ("ckpt-3", "ckpt-2"), ("ckpt-1", "ckpt-3")}
    return 1.0 if (a, b) in beats else -1.0


def league_of_a_cycle(sampler, games_per_checkpoint, seed=0):
    """The league's schedule, as a run has it: the base model, then ckpt-1, 2, 3 each current in
    turn and seated against `games_per_checkpoint` opponents the sampler draws, each game's
    result (``cycle_payoff``) recorded."""
    reg = ModelRegistry()
    reg.add(ModelRef(uid="random-valid", model="random-valid"))
    base = ModelRef(uid="base", kind="base", backend="hf", model="m")
    reg.add(base, current=True)
    rng = random.Random(seed)
    for v in range(4):
        if v:
            reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"/c/{v}"), base)
        for _ in range(games_per_checkpoint):
            me = reg.current
            (opp,) = sampler.sample(ENV, me, 1, reg, rng)
            r = cycle_payoff(me.uid, opp.uid)
            reg.record_game(sample_result(seats=[me, opp], rewards={0: r, 1: -r}))
    return reg


@pytest.mark.parametrize("payoff", ["reward", "outcome"])
def test_psro_from_play_schedules_every_pair_and_keeps_a_cycles_mixture_uniform(payoff):
    """Each new checkpoint plays the members it has not met (pair_games games each) before the
    Nash mixture is drawn from: the cycle's every pair gets its games, and the meta-game sees the
    cycle, a third each. Reading the pairs a checkpoint never met as even matches (0) made the
    mixture pure: each newcomer beats the one member the mixture drew and ties the rest."""
    sampler = PSROSampler(PSROOptions(entry_games=10, resolve_every=20, explore=0.1, pair_games=10, payoff=payoff))
    reg = league_of_a_cycle(sampler, games_per_checkpoint=300)
    uids = ["base", "ckpt-1", "ckpt-2", "ckpt-3"]
    assert all(reg.match_count(a, b) >= 10 for a in uids for b in uids if a < b)
    sampler.solve(reg, reg.current)
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}, abs=1e-9)


def test_psro_does_not_read_a_pair_that_never_played_as_an_even_match():
    """The cycle with ckpt-3 never having met ckpt-1: the meta-game is played among the members
    whose pairs are all known (ckpt-3 waits), and ckpt-3, current, is seated against ckpt-1 until
    the pair has its games; then the cycle is complete and the mixture a third each."""
    reg = population(3)
    for a, b in (("ckpt-1", "ckpt-2"), ("ckpt-2", "ckpt-3")):
        play(reg, a, b, wins_a=0, wins_b=20)
    for v in (1, 2, 3):
        play(reg, f"ckpt-{v}", "base", wins_a=20, wins_b=0)
    sampler = PSROSampler(PSROOptions(entry_games=10, resolve_every=1, explore=0.0, pair_games=5))
    rng = random.Random(0)
    drawn = {sampler.sample(ENV, reg.current, 1, reg, rng)[0].uid for _ in range(50)}
    assert "ckpt-3" not in sampler.mixture() and sampler.mixture()["ckpt-2"] == pytest.approx(1.0)
    assert drawn == {"ckpt-1"}  # the current checkpoint's one missing pair
    play(reg, "ckpt-3", "ckpt-1", wins_a=0, wins_b=5)
    sampler.sample(ENV, reg.current, 1, reg, rng)
    assert sampler.mixture() == pytest.approx({"base": 0.0, "ckpt-1": 1 / 3, "ckpt-2": 1 / 3, "ckpt-3": 1 / 3}, abs=1e-9)


def version(uid):
    return 0 if uid == "base" else int(uid.split("-")[1])


def newer_wins(a, b):
    """A transitive game, as training makes one: the newer checkpoint beats the older (a's reward)."""
    return float((version(a) > version(b)) - (version(a) < version(b)))


def three_cycle(a, b):
    """Rock-paper-scissors over the versions' residues mod 3 (k beats k - 1), same residue even."""
    d = (version(a) - version(b)) % 3
    return 0.0 if d == 0 else 1.0 if d == 1 else -1.0


def league_run(sampler, payoff, periods, seed=0):
    """The league's schedule: the base model, then ckpt-1, 2, ... each current in turn for
    ``periods[v]`` games against opponents the sampler draws, each result (``payoff``) recorded.
    Returns the registry and every uid that was ever a member of the meta-game, checking at every
    draw that each pair of members has pair_games games (the meta-game never reads an unknown pair)."""
    reg = ModelRegistry()
    reg.add(ModelRef(uid="random-valid", model="random-valid"))
    base = ModelRef(uid="base", kind="base", backend="hf", model="m")
    reg.add(base, current=True)
    rng = random.Random(seed)
    ever = set()
    for v, games in enumerate(periods):
        if v:
            reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"/c/{v}"), base)
        for _ in range(games):
            me = reg.current
            (opp,) = sampler.sample(ENV, me, 1, reg, rng)
            members = sampler.members
            if len(members) > 1:
                assert all(reg.match_count(a, b) >= sampler.options.pair_games for a in members for b in members if a < b)
                ever.update(members)
            r = payoff(me.uid, opp.uid)
            reg.record_game(sample_result(seats=[me, opp], rewards={0: r, 1: -r}))
    sampler.sample(ENV, reg.current, 1, reg, rng)  # the last checkpoint's draw, once its games are recorded
    ever.update(sampler.members)
    return reg, ever


@pytest.mark.parametrize("payoff", [newer_wins, three_cycle])
def test_psro_from_play_admits_every_checkpoint_when_a_full_row_costs_more_than_a_checkpoint_plays(payoff):
    """15 games per checkpoint, pair_games = 4: from the 4th checkpoint on a full row (4 games with
    each member) costs more than a checkpoint plays as current. Each still enters the meta-game: the
    current checkpoint meets the Nash support's members first, and once replaced enters on its pairs
    with the support (at most 3 members in both games: 12 games), the members it did not meet
    leaving. Before, the row had to cover the whole population: ckpt-4 to ckpt-6 never entered and the
    mixture froze on ckpt-3."""
    sampler = PSROSampler(PSROOptions(entry_games=4, resolve_every=5, explore=0.0, pair_games=4, payoff="reward"))
    reg, ever = league_run(sampler, payoff, [15] * 8)  # the base model, ckpt-1 to ckpt-6, and ckpt-7 current
    assert {f"ckpt-{v}" for v in range(1, 7)} <= ever
    if payoff is newer_wins:  # the transitive game's meta-game: the newest member, pure
        assert sampler.mixture()["ckpt-6"] == pytest.approx(1.0)


def test_a_checkpoint_replaced_before_it_met_the_support_enters_once_it_met_the_next_one(caplog):
    """ckpt-2 is replaced after 2 games (pair_games = 4): its row is short, the run warns once, and
    it can no longer play the older members (every training game seats the current checkpoint).
    ckpt-3, current, is seated against it after its own row; ckpt-3 enters on its full row and is
    the support (it beats everyone), and ckpt-2, which has met it, enters too. Before, only the
    current checkpoint's pairs were scheduled: ckpt-2 never played again and never entered."""
    sampler = PSROSampler(PSROOptions(entry_games=2, resolve_every=1, explore=0.0, pair_games=4))
    with caplog.at_level("WARNING", logger="unstable.population"):
        reg, ever = league_run(sampler, newer_wins, [10, 20, 2, 40])
    assert reg.match_count("ckpt-2", "ckpt-3") >= 4 and reg.match_count("ckpt-2", "ckpt-1") < 4
    assert "ckpt-2" in sampler.members and "ckpt-3" in sampler.members
    warned = [r.getMessage() for r in caplog.records if "no longer current" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("psro: ckpt-2 ")
