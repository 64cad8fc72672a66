"""The extracted policy of a language model is the policy it plays: over thousands of sampled
games, each information state's action frequencies lie within 4 standard errors of the
probabilities extracted from its token logprobs (the tiny model's base policy and a policy moved
away from it)."""

import json
import math
from collections import Counter, defaultdict

import pytest

import unstable_core

pytest.importorskip("unstable_hf")

KUHN = "openspiel/kuhn_poker"
SAMPLING = {"temperature": 1.0, "top_p": 0.95, "max_tokens": 12}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from unstable_hf.testing import build_fast_tiny

    return build_fast_tiny(tmp_path_factory.getbasetemp() / "tiny", f"tiny:{KUHN}?sft_steps=60&corpus_games=100")


def sampled_play(model, tmp_path, games, answer_mode="free"):
    """Every turn of the model (seat alternating) against random-valid: observation -> action counts."""
    cfg = {"name": "sampled", "seed": 1, "train_envs": [{"env_id": KUHN, "template": "qwen3-zs"}],
           "opponents": [{"uid": "tiny", "model": model, "backend": "hf"}, "random-valid"], "model_sampler": {"name": "fixed"},
           "backends": {"hf": {**SAMPLING, "batch_wait_ms": 5}},
           "collection": {"tournament_games": games, "num_train_games": 64, "transcripts": 1.0, "answers": answer_mode},
           "trackers": []}
    result = unstable_core.run(cfg, run_dir=tmp_path / "play")
    assert result.status == "completed"
    return answers(tmp_path / "play" / "games" / "tournament.jsonl", "tiny")


def answers(transcripts, uid):
    """observation -> counts of the actions ``uid`` played there ("other" for an answer that is no
    canonical one), from a transcript file."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for line in transcripts.read_text().splitlines():
        game = json.loads(line)
        for turn in game["turns"]:
            if game["seats"][turn["player_id"]]["uid"] == uid:
                known = turn["completion"] in (f"\\boxed{{{m}}}" for m in ("[pass]", "[bet]"))
                counts[turn["observation"]][turn["action"] if known else "other"] += 1
    return counts


def test_the_extracted_policy_is_the_sampled_one(tiny, tmp_path):
    from unstable_core import GenerationRequest, ModelRef, build_component
    from unstable_openspiel.exploit import exploitability

    report = exploitability(tiny, KUHN, template="qwen3-zs", sampling={"temperature": 1.0, "top_p": 0.95})
    assert report.info_states == 12 and 0.0 <= report.invalid_mass < 0.05
    counts = sampled_play(tiny, tmp_path, 4000)
    backend = build_component("inference", "hf", SAMPLING)
    render = build_component("template", "qwen3-zs").render
    ref = ModelRef(uid="tiny", model=tiny, backend="hf")

    def probabilities(info):
        request = GenerationRequest(model=ref, prompt=render(info.observation), observation=info.observation, env_id=KUHN)
        return dict(zip(info.labels, backend.completion_probabilities(request, [f"\\boxed{{{label}}}" for label in info.labels])))

    per_state_check(counts, probabilities, min_states=12)


def test_choice_answers_play_the_extracted_policy_and_never_an_invalid_move(tiny, tmp_path):
    """``collection.answers = "choice"``: the model answers one of the legal actions' answers,
    drawn with its probabilities renormalised over them, so every answer is canonical and each
    information state's frequencies match the extracted (renormalised) policy."""
    from unstable_core import GenerationRequest, ModelRef, build_component

    counts = sampled_play(tiny, tmp_path, 3000, answer_mode="choice")
    assert not any(seen["other"] for seen in counts.values())
    backend = build_component("inference", "hf", SAMPLING)
    render = build_component("template", "qwen3-zs").render
    ref = ModelRef(uid="tiny", model=tiny, backend="hf")

    def probabilities(info):
        request = GenerationRequest(model=ref, prompt=render(info.observation), observation=info.observation, env_id=KUHN)
        raw = backend.completion_probabilities(request, [f"\\boxed{{{label}}}" for label in info.labels])
        return {label: p / sum(raw) for label, p in zip(info.labels, raw)}

    per_state_check(counts, probabilities, min_states=12)


def test_a_run_trained_on_choice_answers_trains_a_row_per_choice(tiny, tmp_path):
    """Training with ``answers = "choice"``: every batch holds a row per legal answer of each step
    drawn (two in Kuhn poker; ``expand_choices``), and no game has an invalid move."""
    overrides = [f'model.model="{tiny}"', "training.learning_steps=2", "training.save_every=1", "training.eval_every=0",
                 "training.batch_size=32", 'collection.mode="sync"', "collection.eval_games=64", 'collection.answers="choice"',
                 "collection.eval_policy_metrics=false", 'trackers=[{name="jsonl"}]', "training.filter_zero_advantage=false"]
    examples = __import__("pathlib").Path(__file__).resolve().parents[3] / "examples"
    result = unstable_core.run(examples / "openspiel-kuhn-tiny.toml", run_dir=tmp_path / "run", overrides=overrides)
    assert result.status == "completed" and result.learner_steps == 2
    assert [r.batch_steps for r in result.train_records()] == [64.0, 64.0]
    games = [json.loads(line) for name in ("train.jsonl", "eval.jsonl")
             for line in (tmp_path / "run" / "games" / name).read_text().splitlines()]
    model_turns = [t for g in games for t in g["turns"] if g["seats"][t["player_id"]]["uid"] != "random-valid"]
    assert len(model_turns) > 64 and not any(t["invalid"] for g in games for t in g["turns"])
    assert {t["completion"] for t in model_turns} <= {"\\boxed{[pass]}", "\\boxed{[bet]}"}


def per_state_check(counts, probabilities, min_states):
    """Each information state's action (and non-canonical answer) frequencies against the
    extracted probabilities, within 4 standard errors."""
    from unstable_openspiel.policies import info_states

    checked = 0
    for info in info_states(KUHN):
        seen = counts.get(info.observation)
        if not seen:
            continue
        n = sum(seen.values())
        probs = probabilities(info)
        expected = {**probs, "other": max(0.0, 1.0 - sum(probs.values()))}
        observed = {label: seen.get(label, 0) for label in probs}
        observed["other"] = n - sum(observed.values())
        for key, p in expected.items():
            se = math.sqrt(max(p * (1 - p), 1e-4) / n)
            assert abs(observed[key] / n - p) < 4 * se, (info.observation[-60:], key, observed, expected, n)
        checked += 1
    assert checked >= min_states


def test_a_trained_checkpoints_extracted_policy_is_the_one_it_plays(tiny, tmp_path):
    """A short training run moves the policy; its final evaluation (3,000 games, temperature 0.7,
    no nucleus, so some answers are not canonical) is the sampled play its extraction must match."""
    from unstable_core import GenerationRequest, build_component
    from unstable_openspiel.exploit import exploitability, resolve

    overrides = [f'model.model="{tiny}"', "training.learning_steps=6", "training.save_every=3", "training.eval_every=0",
                 "training.batch_size=64", "learner.lr=1e-2", 'collection.mode="sync"', "collection.eval_games=3000",
                 "collection.num_eval_games=64", "inference.temperature=0.7", "learner.temperature=0.7", "inference.top_p=1.0",
                 "trackers=[]",
                 "collection.eval_policy_metrics=true", 'collection.eval_mixtures=["uniform", "meta"]',
                 # the better half only: at this learning rate the policy moves fast and stays in format
                 'reward.sampling=[{name="normalize"}, {name="scale-negative", scale=0.0}]']
    examples = __import__("pathlib").Path(__file__).resolve().parents[3] / "examples"
    result = unstable_core.run(examples / "openspiel-kuhn-tiny.toml", run_dir=tmp_path / "run", overrides=overrides)
    assert result.status == "completed" and result.learner_steps == 6
    counts = answers(tmp_path / "run" / "games" / "eval.jsonl", "ckpt-6")
    served = resolve(str(tmp_path / "run"), KUHN)
    assert served.ref.uid == "ckpt-6" and served.options["temperature"] == 0.7 and served.template == "qwen3-zs"
    backend = build_component("inference", "hf", served.options)
    render = build_component("template", served.template).render

    def probabilities(info):
        request = GenerationRequest(model=served.ref, prompt=render(info.observation), observation=info.observation, env_id=KUHN)
        return dict(zip(info.labels, backend.completion_probabilities(request, [f"\\boxed{{{label}}}" for label in info.labels])))

    per_state_check(counts, probabilities, min_states=12)
    report = exploitability(str(tmp_path / "run"), KUHN)
    assert report.info_states == 12 and report.invalid_mass > 0.0  # no nucleus: stray answers keep some mass
    # the run's evaluations carry the same figures, computed by the rollout role while it ran
    evals = {r.step: r.policy for r in result.eval_records}
    assert set(evals) == {0, 6} and evals[0]["info_states"] == 12
    assert evals[6]["exploitability"] == pytest.approx(report.exploitability, abs=1e-9)
    assert evals[6]["invalid_mass"] == pytest.approx(report.invalid_mass, abs=1e-9)
    # the population's policy: every checkpoint and the base model, drawn uniformly per game
    from unstable_core import UnstableError
    from unstable_openspiel.exploit import mixture_exploitability

    mixed = mixture_exploitability(str(tmp_path / "run"), KUHN)
    assert mixed.members == pytest.approx({"base": 1 / 3, "ckpt-3": 1 / 3, "ckpt-6": 1 / 3}) and 0.0 < mixed.exploitability < 1.0
    # ... which the run's last evaluation computed too (eval_mixtures); the first one's population
    # is the base model alone; `mirror` keeps no meta mixture, so there is none
    mixtures = {r.step: r.mixtures for r in result.eval_records}
    assert set(mixtures[6]) == {"uniform"} and mixtures[6]["uniform"]["members"] == 3
    assert mixtures[6]["uniform"]["exploitability"] == pytest.approx(mixed.exploitability, abs=1e-9)
    assert mixtures[0]["uniform"]["members"] == 1
    assert mixtures[0]["uniform"]["exploitability"] == pytest.approx(evals[0]["exploitability"], abs=1e-9)
    with pytest.raises(UnstableError, match="registry.json holds no meta mixture"):
        mixture_exploitability(str(tmp_path / "run"), KUHN, "meta")  # the run's sampler is `mirror`
    # the population as it stood at ckpt-3 (`--checkpoint ckpt-3`): its first evaluation's policy and ckpt-3's
    earlier = mixture_exploitability(str(tmp_path / "run"), KUHN, "uniform", upto="ckpt-3")
    assert earlier.members == pytest.approx({"base": 1 / 2, "ckpt-3": 1 / 2})
    assert earlier.exploitability != pytest.approx(mixed.exploitability, abs=1e-6)
    assert mixture_exploitability(str(tmp_path / "run"), KUHN, "uniform", upto="base").exploitability == pytest.approx(
        evals[0]["exploitability"], abs=1e-9)
    with pytest.raises(UnstableError, match="no checkpoint 'ckpt-4'"):
        mixture_exploitability(str(tmp_path / "run"), KUHN, "uniform", upto="ckpt-4")
    with pytest.raises(UnstableError, match="the run keeps only its last meta mixture"):
        mixture_exploitability(str(tmp_path / "run"), KUHN, "meta", upto="ckpt-3")


def test_a_tiny_models_cache_key_follows_the_env_providers_version(monkeypatch):
    """A tiny model warm-started on another provider's text is rebuilt when that provider's
    version (and so, possibly, its text) changes; textarena models keep their keys."""
    import dataclasses

    import unstable_core
    from unstable_hf.tiny import TinySpec

    spec = TinySpec(env_ids=(KUHN,))
    before, textarena = spec.key(), TinySpec().key()
    system = unstable_core.get_plugin_system()
    real = system.provider_of

    def newer(kind, name):
        record = real(kind, name)
        return dataclasses.replace(record, version="9.9") if name == "openspiel" else record

    monkeypatch.setattr(system, "provider_of", newer)
    assert spec.key() != before and TinySpec().key() == textarena


def test_a_tiny_model_can_warm_start_on_an_openspiel_agent():
    """``sft_backend = "openspiel"``: the warm start imitates an agent of another backend (here
    the best response to random-valid, which plays by its card), through the same env and template."""
    from unstable_hf.tiny import TinySpec, scripted_games

    spec = TinySpec.parse(f"tiny:{KUHN}?sft_agent=best-response:random-valid&sft_backend=openspiel")
    spec.check_agents()
    pairs = scripted_games(spec, 30, seed=0)
    answers = {(prompt.split("Your card: ")[1][0], completions[0]) for prompt, completions, _ in pairs
               if "Betting so far: none." in prompt}
    assert answers and all(c in ("\\boxed{[pass]}", "\\boxed{[bet]}") for _, c in answers)
    assert len({card for card, _ in answers}) == len(answers)  # one answer per card: a deterministic policy
    with pytest.raises(ValueError, match="sft_backend: unknown inference 'nope'"):
        TinySpec.parse("tiny?sft_backend=nope").check_agents()


def psro_run(tiny, run, sampler):
    """Four updates of the Kuhn example from ``tiny`` with ``sampler`` (a checkpoint every two):
    the league's registry state at the end."""
    overrides = [f'model.model="{tiny}"', "training.learning_steps=4", "training.save_every=2", "training.eval_every=0",
                 "training.batch_size=64", "learner.lr=1e-2", 'collection.mode="sync"', "trackers=[]", sampler,
                 'reward.sampling=[{name="normalize"}, {name="scale-negative", scale=0.0}]']
    examples = __import__("pathlib").Path(__file__).resolve().parents[3] / "examples"
    result = unstable_core.run(examples / "openspiel-kuhn-tiny.toml", run_dir=run, overrides=overrides)
    assert result.status == "completed" and result.learner_steps == 4
    latest = json.loads((run / "state" / "latest").read_text())["path"]
    return json.loads((run / "state" / latest / "state.json").read_text())["state"]["league"]["registry"]


def test_psro_on_exact_payoffs_reads_what_the_checkpoints_win_against_each_other(tiny, tmp_path):
    """psro's payoff = "exact" on Kuhn poker: with every checkpoint the run computes its exact
    expected chips against each earlier one (through the rollout role's backend); they are what
    the saved checkpoints, served afresh, give, and psro's mixture is the meta-game's Nash."""
    pytest.importorskip("unstable_population")
    from unstable_core import get_plugin_system
    from unstable_openspiel import policies
    from unstable_openspiel.exploit import from_run_dir, served_probabilities
    from unstable_population.meta import nash_mixture

    run = tmp_path / "run"
    registry = psro_run(tiny, run, 'model_sampler={name="psro", payoff="exact"}')
    recorded = {(a, b): v for a, b, v in registry["payoffs"]}
    assert set(recorded) == {("base", "ckpt-2"), ("base", "ckpt-4"), ("ckpt-2", "ckpt-4")}
    system = get_plugin_system()
    scored = {uid: served_probabilities(from_run_dir(run, KUHN, uid, None), KUHN, {}, 100, system) for uid in ("base", "ckpt-2", "ckpt-4")}
    for (a, b), value in recorded.items():
        assert value == pytest.approx(policies.expected_payoffs(KUHN, {}, scored[a], [scored[b]])[0], abs=1e-9)
    assert any(abs(v) > 1e-4 for v in recorded.values())  # training moved the policy
    # the mixture psro last drew from: the Nash of the checkpoints computed by then (the last
    # checkpoint's payoffs may come after the last game was drawn)
    mixture = json.loads((run / "registry.json").read_text())["mixture"]
    uids = list(mixture)
    assert uids[:2] == ["base", "ckpt-2"] and set(uids) <= {"base", "ckpt-2", "ckpt-4"}
    matrix = [[0.0 if a == b else (recorded[(a, b)] if (a, b) in recorded else -recorded[(b, a)]) for b in uids] for a in uids]
    assert [mixture[uid] for uid in uids] == pytest.approx(nash_mixture(matrix), abs=1e-6)
    from unstable_openspiel.exploit import mixture_exploitability  # `unstable exploitability RUN --mixture meta` reads it

    meta = mixture_exploitability(str(run), KUHN, "meta")
    assert meta.members == pytest.approx({uid: w for uid, w in mixture.items() if w > 0}) and 0.0 < meta.exploitability < 1.0
    # `--mixture least`: the least exploitable mixture of every checkpoint, no more exploitable
    # than psro's or the uniform one, and its members at its weights play at what it reports
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "unstable_core.cli", "exploitability", str(run), "--env", KUHN,
                           "--mixture", "least", "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    least = json.loads(done.stdout)
    uniform = mixture_exploitability(str(run), KUHN, "uniform")
    assert least["mixture"] == "least" and set(least["members"]) <= set(scored)
    assert sum(least["members"].values()) == pytest.approx(1.0)
    assert least["exploitability"] <= min(meta.exploitability, uniform.exploitability) + 1e-9
    again = policies.mixture_metrics(KUHN, {}, [(w, scored[uid]) for uid, w in least["members"].items()])
    assert again["exploitability"] == pytest.approx(least["exploitability"], abs=1e-9)


def test_psro_with_the_least_meta_solver_draws_from_the_members_least_exploitable_mixture(tiny, tmp_path):
    """psro's meta_solver = "least" on Kuhn poker: after each checkpoint the run computes its
    members' least exploitable mixture (through the rollout role's backend); at the recorded
    weights the served checkpoints' mixture is as exploitable as an independent solve says, and
    no member, nor their uniform mixture, is less."""
    pytest.importorskip("unstable_population")
    from unstable_core import get_plugin_system
    from unstable_openspiel import policies
    from unstable_openspiel.exploit import from_run_dir, served_probabilities
    from unstable_openspiel.least_exploitable import least_exploitable

    run = tmp_path / "run"
    least = psro_run(tiny, run, 'model_sampler={name="psro", payoff="exact", meta_solver="least"}')["least"]
    members, weights = least["members"], least["weights"]
    assert members == ["base", "ckpt-2", "ckpt-4"] and sum(weights) == pytest.approx(1.0)
    system = get_plugin_system()
    scored = {uid: served_probabilities(from_run_dir(run, KUHN, uid, None), KUHN, {}, 100, system) for uid in members}
    tables = [policies.extract(KUHN, {}, scored[uid]).policy for uid in members]
    _, floor = least_exploitable(KUHN, {}, tables)
    at_weights = policies.mixture_metrics(KUHN, {}, [(w, scored[uid]) for uid, w in zip(members, weights, strict=True)])
    assert at_weights["exploitability"] == pytest.approx(floor, abs=1e-7)
    alone = [policies.metrics(KUHN, {}, scored[uid])["exploitability"] for uid in members]
    uniform = policies.mixture_metrics(KUHN, {}, [(1 / 3, scored[uid]) for uid in members])["exploitability"]
    assert floor <= min(*alone, uniform) + 1e-9
    assert max(alone) - floor > 1e-3  # the members differ: the solve had something to choose
    # the mixture psro drew from last: the least exploitable one of the members by then
    mixture = json.loads((run / "registry.json").read_text())["mixture"]
    assert list(mixture) in (members, members[:2])


def test_exploitability_of_a_run_takes_its_game_names_its_checkpoint_and_counts_its_population(tiny, tmp_path):
    """`unstable exploitability RUN_DIR` without --env measures the game the run played, says which
    checkpoint it measured, counts every model of the population in a mixture (weight 0 ones too),
    and warns when --env names a game the run did not play."""
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "unstable_core.cli", "exploitability", *map(str, args)],
                              capture_output=True, text=True, timeout=300)

    run = tmp_path / "run"
    psro_run(tiny, run, 'model_sampler={name="mirror"}')  # base, ckpt-2, ckpt-4
    done = cli(run)
    assert done.returncode == 0, done.stderr
    assert f"(ckpt-4) on {KUHN}: exploitability" in done.stdout and "is not the game" not in done.stderr
    report = json.loads(cli(run, "--json").stdout)
    assert report["checkpoint"] == "ckpt-4" and report["env"] == KUHN
    assert json.loads(cli(run, "--checkpoint", "ckpt-2", "--json").stdout)["checkpoint"] == "ckpt-2"
    least = cli(run, "--mixture", "least")
    assert least.returncode == 0, least.stderr
    members = json.loads(cli(run, "--mixture", "least", "--json").stdout)
    assert members["population"] == 3
    kept = len(members["members"])
    assert least.stdout.startswith("least mixture of 3 models" + (f" ({kept} of weight > 0)" if kept < 3 else "") + " of ")
    other = cli(run, "--env", "openspiel/leduc_poker", "--max-info-states", "10")
    assert f"warning: --env openspiel/leduc_poker is not the game {run} played ({KUHN})" in other.stderr


def test_exploitability_warns_when_nearly_every_answer_is_invalid_and_needs_the_game_without_a_run():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "unstable_core.cli", "exploitability", "garbage", "--env", KUHN],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "warning: garbage puts 100% of its probability on invalid answers" in done.stderr
    quiet = subprocess.run([sys.executable, "-m", "unstable_core.cli", "exploitability", "random-valid", "--env", KUHN],
                           capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and "warning" not in quiet.stderr
    bare = subprocess.run([sys.executable, "-m", "unstable_core.cli", "exploitability", "random-valid"],
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and "give the game with --env" in bare.stderr and "Traceback" not in bare.stderr
