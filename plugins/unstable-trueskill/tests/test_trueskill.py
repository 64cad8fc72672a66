import json
import random
from collections import Counter

import pytest
import trueskill

import unstable_trueskill.plugin as plugin
from unstable_core import Checkpoint, EnvSpec, ModelRef, ModelRegistry
from unstable_core.testing import ModelSamplerContract, RaterContract, sample_result
from unstable_trueskill.plugin import RatingSampler, SamplerOptions, TrueSkillOptions, TrueSkillRater, softmax


class TestRaterConformance(RaterContract):
    plugin = plugin
    name = "trueskill"


@pytest.mark.parametrize("sname", ["match-quality", "ts-dist"])
class TestSamplerConformance(ModelSamplerContract):
    plugin = plugin

    @pytest.fixture
    def spec(self, system, sname):
        return system.get("model_sampler", sname)


def registry(uids):
    reg = ModelRegistry()
    for u in uids:
        reg.add(ModelRef(uid=u, model=u))
    return reg


def test_replay_1000_games_matches_trueskill_library():
    rng = random.Random(7)
    uids = ["a", "b", "c", "d", "e"]
    reg = registry(uids)
    rater = TrueSkillRater(TrueSkillOptions(beta=4.0, draw_probability=0.1))
    env = trueskill.TrueSkill(mu=25.0, sigma=25 / 3, beta=4.0, tau=25 / 300, draw_probability=0.1)
    ref = {u: env.create_rating() for u in uids}
    for g in range(1200):
        n = 2 if g % 3 else 3
        seats = rng.sample(uids, n)
        rewards = {i: float(rng.choice([-1, 0, 1])) for i in range(n)}
        result = sample_result(seats=[ModelRef(uid=u) for u in seats], rewards=rewards)
        rater.update(result, reg)
        # the library's own functions, by hand
        if n == 2:
            r0, r1 = rewards[0], rewards[1]
            if r0 == r1:
                ref[seats[0]], ref[seats[1]] = env.rate_1vs1(ref[seats[0]], ref[seats[1]], drawn=True)
            elif r0 > r1:
                ref[seats[0]], ref[seats[1]] = env.rate_1vs1(ref[seats[0]], ref[seats[1]])
            else:
                ref[seats[1]], ref[seats[0]] = env.rate_1vs1(ref[seats[1]], ref[seats[0]])
        else:
            levels = sorted(set(rewards.values()), reverse=True)
            new = env.rate([(ref[u],) for u in seats], ranks=[levels.index(rewards[i]) for i in range(n)])
            for u, (r,) in zip(seats, new):
                ref[u] = r
    for u in uids:
        got = reg.get(u).rating
        assert abs(got["mu"] - ref[u].mu) < 1e-9 and abs(got["sigma"] - ref[u].sigma) < 1e-9
        assert got["conservative"] == pytest.approx(ref[u].mu - 3 * ref[u].sigma, abs=1e-9)


def test_new_checkpoint_inherits_mu_with_raised_sigma():
    reg = ModelRegistry()
    base = ModelRef(uid="base", kind="base", backend="x", model="m")
    reg.add(base, current=True)
    reg.add(ModelRef(uid="opp"))
    rater = TrueSkillRater(TrueSkillOptions(checkpoint_sigma_factor=1.5))
    for _ in range(10):
        rater.update(sample_result(seats=[base, reg.get("opp").ref], rewards={0: 1, 1: -1}), reg)
    prev = rater.rating("base", reg)
    ck = reg.add_checkpoint(Checkpoint(uid="ckpt-1", version=1, path="/x"), base)
    new = rater.rating("ckpt-1", reg)
    assert new.mu == prev.mu and new.sigma == pytest.approx(min(prev.sigma * 1.5, 25 / 3))
    assert ck.uid == "ckpt-1"


def test_single_player_rated_against_env_dummy_and_per_env():
    reg = registry(["solo"])
    rater = TrueSkillRater(TrueSkillOptions(per_env=True))
    r = sample_result(seats=[ModelRef(uid="solo")], rewards={0: 1.0}, env_id="Guess-v0")
    rater.update(r, reg)
    env = trueskill.TrueSkill(beta=4.0, tau=25 / 300, draw_probability=0.1)
    expected, _ = env.rate_1vs1(env.create_rating(), env.create_rating())
    assert reg.get("solo").rating["mu"] == pytest.approx(expected.mu, abs=1e-9)
    assert reg.get("solo").rating["mu@Guess-v0"] == pytest.approx(expected.mu, abs=1e-9)
    assert "env:any" in rater.table and "env:Guess-v0@Guess-v0" in rater.table


def _chi_square_p(observed, expected):
    from scipy.stats import chisquare

    return chisquare(observed, expected).pvalue


@pytest.mark.parametrize("kind", ["match-quality", "ts-dist"])
def test_sampling_frequencies_match_softmax(kind):
    reg = registry(["a", "b", "c", "d"])
    for uid, mu, sigma in [("a", 25, 3), ("b", 28, 2), ("c", 20, 5), ("d", 31, 1)]:
        reg.get(uid).rating.update(mu=mu, sigma=sigma)
    sampler = RatingSampler(SamplerOptions(temperature=0.5 if kind == "ts-dist" else 0.05), kind)
    anchor = reg.get("a").ref
    env = trueskill.TrueSkill(beta=4.0)
    others = ["b", "c", "d"]
    if kind == "match-quality":
        scores = [env.quality_1vs1(env.create_rating(25, 3), env.create_rating(*{"b": (28, 2), "c": (20, 5), "d": (31, 1)}[o])) for o in others]
    else:
        scores = [-abs(25 - {"b": 28, "c": 20, "d": 31}[o]) for o in others]
    probs = softmax(scores, sampler.options.temperature)
    draws = sampler.sample(EnvSpec(env_id="x"), anchor, 10_000, reg, random.Random(0))
    counts = Counter(m.uid for m in draws)
    observed = [counts[o] for o in others]
    assert sum(observed) == 10_000
    assert _chi_square_p(observed, [p * 10_000 for p in probs]) > 0.001
    # and a wrong distribution is rejected by the same test
    assert _chi_square_p(observed, [10_000 / 3] * 3) < 1e-6


def test_max_active_caps_checkpoints():
    reg = ModelRegistry()
    base = ModelRef(uid="base", kind="base", backend="x", model="m")
    reg.add(base, current=True)
    for v in range(1, 6):
        reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path="/x"), base)
    sampler = RatingSampler(SamplerOptions(max_active=2), "ts-dist")
    before = json.dumps(reg.snapshot(), sort_keys=True)
    cands = sampler.candidates(reg.current, reg)
    assert [c.uid for c in cands] == ["ckpt-4"]  # last two are 4 and 5; 5 is the anchor
    sampler.sample(EnvSpec(env_id="x"), reg.current, 50, reg, random.Random(0))
    assert json.dumps(reg.snapshot(), sort_keys=True) == before, "a sampler changed the registry it was shown"
    assert reg.get("ckpt-1").active


def test_tournament_ranks_greedy_above_random(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[3] / "examples" / "trueskill-tournament.toml"
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "run", str(example), "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "ratings", str(run_dir), "--json",
                          "--heatmap", str(tmp_path / "h.png")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {r["uid"]: r for r in json.loads(out.stdout)}
    assert rows["greedy"]["mu"] - 3 * rows["greedy"]["sigma"] > rows["random-valid"]["mu"] - 3 * rows["random-valid"]["sigma"]
    assert {"uid", "mu", "sigma", "games"} <= set(rows["greedy"])
    assert (tmp_path / "h.png").stat().st_size > 1000
    ratings = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"ratings"' in line]
    assert ratings and "mu" in ratings[-1]["ratings"]["greedy"]
    table = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "ratings", str(run_dir)],
                           capture_output=True, text=True, env={**__import__("os").environ, "COLUMNS": "150"})
    assert "greedy" in table.stdout and "mu - 3 sigma" in table.stdout
    missing = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "ratings", str(tmp_path / "nope")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "registry.json" in missing.stderr
    unwritable = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "ratings", str(run_dir),
                                 "--heatmap", "/proc/h.png"], capture_output=True, text=True)
    assert unwritable.returncode == 2 and "cannot write /proc/h.png" in unwritable.stderr and "Traceback" not in unwritable.stderr
    registry = run_dir / "registry.json"
    for bad, message in (('{"models": 3}', "'models' must be a list"), ("[1]", "a JSON list, not an object"),
                         ('{"models": [{"uid": "a", "rating": {"mu": "x"}}]}', "model 'a': 'rating' must be an object with numbers"),
                         ('{"models": [], "pairs": [{"a": "x"}]}', "'pairs' must be a list of objects with an integer 'games'")):
        registry.write_text(bad)
        broken = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "ratings", str(run_dir),
                                 "--heatmap", str(tmp_path / "h2.png")], capture_output=True, text=True)
        assert broken.returncode == 2 and "not a registry snapshot" in broken.stderr and message in broken.stderr, broken.stderr
        assert "Traceback" not in broken.stderr


def test_rater_state_holds_what_the_registry_does_not():
    """Env dummies and per-env ratings live only in the rater's table: a restored rater continues
    from them (the contract's round trip checks equal behaviour; this checks what is saved)."""
    reg = registry(["solo"])
    rater = TrueSkillRater(TrueSkillOptions(per_env=True))
    rater.update(sample_result(seats=[ModelRef(uid="solo")], rewards={0: 1.0}, env_id="Guess-v0"), reg)
    state = json.loads(json.dumps(rater.state_dict()))
    assert {"solo", "env:any", "solo@Guess-v0", "env:Guess-v0@Guess-v0"} <= set(state["table"])
    fresh = TrueSkillRater(TrueSkillOptions(per_env=True))
    fresh.load_state_dict(state)
    assert fresh.rating("env:any").mu == rater.rating("env:any").mu


def test_a_sync_run_killed_at_random_points_ends_with_the_same_ratings(tmp_path):
    """TrueSkill rater (per env) and the match-quality sampler over checkpoints, in a sync toy run
    SIGKILLed three times and resumed: the final registry (ratings, counts) and the metrics equal
    the uninterrupted run's."""
    import unstable_core
    from unstable_core.testing import comparable_metrics, run_with_kills, toy_config, toy_plugin

    cfg = toy_config(
        rater={"name": "trueskill", "per_env": True},
        model_sampler={"name": "match-quality", "max_active": 4},
        learner={"name": "tabular-reinforce", "lr": 0.2},
        training={"learning_steps": 20, "batch_size": 16, "eval_every": 10, "filter_zero_advantage": False},
        collection={"mode": "sync", "num_train_games": 8, "num_eval_games": 8, "eval_games": 16},
    )
    system = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    unstable_core.run(cfg, run_dir=tmp_path / "full", plugins=system)
    landed = run_with_kills(tmp_path / "killed", cfg, random.Random(2), kills=3, most_events=300,
                            plugins=["unstable_core.testing:toy_plugin"])
    assert landed >= 2

    def final(run_dir):
        return json.loads((run_dir / "registry.json").read_text()), comparable_metrics(run_dir)

    (registry_full, metrics_full), (registry_killed, metrics_killed) = final(tmp_path / "full"), final(tmp_path / "killed")
    assert registry_killed == registry_full
    assert any("mu@PickBest-v0" in m["rating"] for m in registry_full["models"])
    assert metrics_killed == metrics_full


@pytest.mark.parametrize("kind", ["match-quality", "ts-dist"])
def test_a_new_anchor_is_scored_at_the_rating_the_rater_starts_it_at(kind):
    """A checkpoint that has played no game yet is scored at the rating the run's rater will
    give it at its first game (the previous checkpoint's mu, its sigma raised), not at the
    default mu = 25: the new anchor's first opponents are those near where it starts."""
    from unstable_core import BuildContext

    reg = ModelRegistry()
    base = ModelRef(uid="base", kind="base", backend="x", model="m")
    reg.add(base, current=True)
    for uid in ("weak", "strong"):
        reg.add(ModelRef(uid=uid, kind="fixed", model=uid))
    options = {"name": "trueskill", "checkpoint_sigma_factor": 1.5, "beta": 4.0}
    rater = TrueSkillRater(TrueSkillOptions(checkpoint_sigma_factor=1.5))
    for _ in range(12):  # base beats weak and loses to strong: its mu leaves 25 behind
        rater.update(sample_result(seats=[base, reg.get("weak").ref], rewards={0: 1, 1: -1}), reg)
    for _ in range(2):
        rater.update(sample_result(seats=[base, reg.get("strong").ref], rewards={0: -1, 1: 1}), reg)
    anchor = reg.add_checkpoint(Checkpoint(uid="ckpt-1", version=1, path="/x"), base)
    assert "mu" not in reg.get("ckpt-1").rating  # not rated yet
    spec = plugin.unstable_model_samplers()[["match-quality", "ts-dist"].index(kind)]
    sampler = spec.factory(SamplerOptions(include_anchor=False), BuildContext(config={"rater": options}))
    start = rater.rating("ckpt-1", reg)  # what the rater gives it at its first game
    assert abs(start.mu - 25.0) > 2.0
    env = trueskill.TrueSkill(beta=4.0)
    for other in ("weak", "strong", "base"):
        om, osg = reg.get(other).rating["mu"], reg.get(other).rating["sigma"]
        expected = (env.quality_1vs1(env.create_rating(start.mu, start.sigma), env.create_rating(om, osg))
                    if kind == "match-quality" else -abs(start.mu - om))
        assert sampler.score(anchor, reg.get(other).ref, reg) == pytest.approx(expected, abs=1e-12)
        # and as a candidate against a rated anchor, at the same start
        assert sampler.score(reg.get(other).ref, anchor, reg) == pytest.approx(expected, abs=1e-12)


def test_the_samplers_read_the_runs_rater_options():
    """Built for a run, a sampler starts unrated models with the run's own `[rater]` options."""
    from unstable_core import BuildContext, ModelSamplerSpec, RunConfig, load_plugins
    from unstable_core.testing import toy_config, toy_plugin

    system = load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("trueskill", plugin)], strict=True)
    spec = system.spec(ModelSamplerSpec, "ts-dist")
    for rater, factor in (({"name": "trueskill", "checkpoint_sigma_factor": 1.5, "mu": 20.0}, 1.5), ({"name": "wins"}, 2.0)):
        cfg = RunConfig.model_validate(toy_config(rater=rater, model_sampler={"name": "ts-dist"}))
        # as a run builds it: the factory's context holds the resolved run config
        sampler = spec.factory(spec.config(), BuildContext(config=cfg.model_dump(mode="json"), plugins=system))
        assert sampler.rater.checkpoint_sigma_factor == factor
        assert sampler.rater.mu == rater.get("mu", 25.0)


def _ratings_cli(*args, columns=80):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "ratings", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": str(columns)})


def test_ratings_of_a_run_without_trueskill_say_so_and_show_no_prior(tmp_path):
    """A run rated by `wins` holds no mu or sigma: the command says so and shows the counts, never
    the TrueSkill prior (25.00, 8.33) as if the models were rated; model names are whole at 80 columns."""
    long_uid = "openspiel/leduc_poker-cfr-average-policy-500"
    models = [{"uid": "greedy", "kind": "fixed", "games": 10, "wins": 8, "draws": 0, "losses": 2, "rating": {"score": 0.8}},
              {"uid": long_uid, "kind": "fixed", "games": 10, "wins": 2, "draws": 0, "losses": 8, "rating": {"score": 0.2}}]
    (tmp_path / "registry.json").write_text(json.dumps({"models": models, "pairs": []}))
    (tmp_path / "config.json").write_text(json.dumps({"config": {"rater": {"name": "wins"}}}))
    out = _ratings_cli(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "25.00" not in out.stdout and "8.33" not in out.stdout
    assert "no TrueSkill ratings" in out.stderr and "'wins'" in out.stderr
    assert any(long_uid in line for line in out.stdout.splitlines()), out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    rows = json.loads(_ratings_cli(tmp_path, "--json").stdout)
    assert [r["uid"] for r in rows] == ["greedy", long_uid]  # by the rater's score
    assert rows[0]["mu"] is None and rows[0]["score"] == 0.8 and rows[0]["wins"] == 8


def test_ratings_show_a_model_without_a_game_as_unrated_and_names_whole_at_80_columns(tmp_path):
    long_uid = "checkpoint-of-a-rather-long-run-name-step-000120"
    models = [{"uid": long_uid, "kind": "checkpoint", "games": 30, "wins": 20, "draws": 0, "losses": 10,
               "rating": {"mu": 27.5, "sigma": 3.1, "conservative": 27.5 - 9.3}},
              {"uid": "new-one", "kind": "checkpoint", "games": 0, "rating": {}}]
    (tmp_path / "registry.json").write_text(json.dumps({"models": models, "pairs": []}))
    out = _ratings_cli(tmp_path)
    assert out.returncode == 0, out.stderr
    assert "25.00" not in out.stdout and "8.33" not in out.stdout
    assert any(long_uid in line for line in out.stdout.splitlines()), out.stdout
    assert "18.20" in out.stdout and "left out at 80 columns" in out.stdout  # mu - 3 sigma stays; mu left out
    assert "27.50" in _ratings_cli(tmp_path, columns=120).stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80
    rows = {r["uid"]: r for r in json.loads(_ratings_cli(tmp_path, "--json").stdout)}
    assert rows["new-one"]["mu"] is None and rows[long_uid]["mu"] == 27.5
