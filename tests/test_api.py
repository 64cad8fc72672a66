"""The Python API: run() and the build() builder, from a path, a dict or a RunConfig."""

import json
import threading

import pytest

import unstable_core
from unstable_core import ConfigError, EvalRecord, RunConfig
from unstable_core.testing import toy_config, toy_plugin


def test_run_the_tournament_example_from_python(tmp_path):
    result = unstable_core.run("examples/tournament.toml", run_dir=tmp_path / "t", overrides=["collection.tournament_games=120"])
    assert result.status == "completed" and result.games_played == 120 and result.learner_steps == 0
    assert result.eval_records and all(isinstance(r, EvalRecord) for r in result.eval_records)
    assert {r.model for r in result.eval_records} == {"greedy", "random-valid", "first-valid"}
    # the records are the ones in metrics.jsonl
    lines = [json.loads(line) for line in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in lines if r["type"] == "eval"] == [r.model_dump(mode="json") for r in result.eval_records]
    # the log opens with what the run plans and closes with how it ended (the dashboard reads both)
    start, end = lines[0], lines[-1]
    assert (start["type"], start["mode"], start["total"], start["name"]) == ("start", "tournament", 120, "tournament")
    assert start["config"]["collection"]["tournament_games"] == 120 and any(p["name"] == "core.samplers" for p in start["plugins"])
    assert (end["type"], end["status"], end["games"]) == ("end", "completed", 120)
    # the ratings records carry the games per pair of models as the registry counts them (each
    # record the pairs that played since the one before): each pair's latest is the registry's
    registry = json.loads((tmp_path / "t" / "registry.json").read_text())
    ratings = [r for r in lines if r["type"] == "ratings"]
    latest = {(p["a"], p["b"]): p for r in ratings for p in r["pairs"]}
    assert sorted(latest.values(), key=lambda p: (p["a"], p["b"])) == registry["pairs"]
    assert sum(p["games"] for p in registry["pairs"]) == 120


def test_a_dict_and_a_run_config_give_the_same_run(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    cfg = toy_config(training={"learning_steps": 3, "batch_size": 8})
    a = unstable_core.run(cfg, run_dir=tmp_path / "a", plugins=system)
    b = unstable_core.run(RunConfig.model_validate(cfg), run_dir=tmp_path / "b", plugins=system)
    assert a.status == b.status == "completed" and a.learner_steps == b.learner_steps == 3
    records = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert (records[0]["mode"], records[0]["total"]) == ("train", 3)
    assert [r["step"] for r in records if r["type"] == "train"] == [1, 2, 3]
    assert all(r["update_s"] > 0 for r in records if r["type"] == "train")  # the dashboard's learner tokens/s
    # the evaluation before training is seeded and the same (async training itself is not)
    assert a.eval_records[0].step == 0
    assert a.eval_records[0].model_dump(exclude={"time"}) == b.eval_records[0].model_dump(exclude={"time"})


def test_build_checks_everything_and_writes_nothing(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    job = unstable_core.build(toy_config(), run_dir=tmp_path / "r", plugins=system, overrides=["training.learning_steps=2"])
    assert job.plan.config.training.learning_steps == 2 and not (tmp_path / "r").exists()
    assert {"env", "learner", "inference", "trackers.0", "reward.final.0"} <= set(job.plan.recipes)
    with pytest.raises(ConfigError, match="learner.lr: input should be greater than 0"):
        unstable_core.build(toy_config(learner={"name": "tabular-reinforce", "lr": -1}), run_dir=tmp_path / "x", plugins=system)
    with pytest.raises(ConfigError, match="a path, a dict or a RunConfig"):
        unstable_core.build(42)


def test_the_plan_pickles(make_plugin_system, tmp_path):
    import pickle

    plan = unstable_core.build(toy_config(), run_dir=tmp_path / "r", plugins=make_plugin_system(toy_plugin)).plan
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_stop_ends_a_started_run_cleanly(make_plugin_system, tmp_path):
    system = make_plugin_system()
    cfg = {"name": "long", "train_envs": ["TicTacToe-v0-train"], "opponents": ["random-valid", "greedy"],
           "model_sampler": {"name": "fixed"}, "collection": {"tournament_games": 10_000_000}, "trackers": [{"name": "jsonl"}]}
    job = unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system)
    started = threading.Event()

    class Watch:
        games = 0

        @unstable_core.hookimpl
        def unstable_game_end(self, ctx):
            Watch.games += 1
            if Watch.games == 200:
                started.set()

    system.register(Watch(), name="watch", package="test", version="0")
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=job.start()), daemon=True)
    thread.start()
    assert started.wait(60)
    job.stop()
    thread.join(60)
    assert not thread.is_alive()
    result = outcome["result"]
    assert result.status == "interrupted" and 200 <= result.games_played < 10_000_000
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1] == {"type": "end", "status": "interrupted", "games": result.games_played, "error": None,
                           "step": 0, "time": records[-1]["time"]}
    assert records[-2]["type"] == "ratings" and records[-3]["games"] == result.games_played


def test_a_run_stopped_while_its_roles_are_built_ends_at_once_and_they_are_shut_down(make_plugin_system, tmp_path):
    """Building the roles can load models for minutes: a stop (Ctrl-C) then ends the run without
    waiting for the build, and what the build makes after that is shut down, not left behind."""
    from unstable_core.builtin.inference_scripted import ScriptedInference
    from unstable_core.components import InferenceSpec

    building, release, closed = threading.Event(), threading.Event(), threading.Event()

    class Backend(ScriptedInference):
        def close(self):
            closed.set()

    class SlowToLoad:
        @unstable_core.hookimpl
        def unstable_inference_backends(self):
            def load(options, ctx):
                building.set()
                release.wait(60)  # a model that takes long to load
                return Backend()

            return [InferenceSpec(name="slow", summary="test", factory=load, serves_checkpoints=False)]

    system = make_plugin_system(SlowToLoad())
    cfg = {"name": "slow", "train_envs": ["TicTacToe-v0-train"], "model_sampler": {"name": "fixed"},
           "opponents": [{"uid": "a", "model": "random-valid", "backend": "slow"}, "first-valid"],
           "collection": {"tournament_games": 10}}
    job = unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system)
    outcome = {}
    thread = threading.Thread(target=lambda: outcome.update(result=job.start()), daemon=True)
    try:
        thread.start()
        assert building.wait(60)
        job.stop()
        thread.join(20)
        assert not thread.is_alive(), "the stopped run waited for its roles to be built"
        assert outcome["result"].status == "interrupted" and outcome["result"].games_played == 0
        assert not closed.is_set()
    finally:
        release.set()
    assert closed.wait(60)  # the build ended after the stop: its rollout was shut down


def test_a_run_puts_back_the_signal_handlers_it_found(make_plugin_system, tmp_path):
    import signal

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        sigint = signal.getsignal(signal.SIGINT)
        result = unstable_core.run(toy_config(training={"learning_steps": 2, "batch_size": 8}), run_dir=tmp_path / "r",
                                   plugins=make_plugin_system(toy_plugin))
        assert result.status == "completed"
        assert signal.getsignal(signal.SIGTERM) is mine and signal.getsignal(signal.SIGINT) is sigint
    finally:
        signal.signal(signal.SIGTERM, before)


def _deep(levels):
    d = {}
    for _ in range(levels):
        d = {"a": d}
    return d


@pytest.mark.parametrize("call, message", [
    (lambda tmp: unstable_core.run("examples/tournament.toml", plugins="x", run_dir=tmp / "r"), "plugins must be a PluginSystem"),
    (lambda tmp: unstable_core.build("examples/tournament.toml", overrides=[1]), "overrides must be 'KEY=VALUE' strings; found 1"),
    (lambda tmp: unstable_core.build("examples/tournament.toml", overrides="a=b"), "not a string"),
    (lambda tmp: unstable_core.build(None, run_dir=tmp, resume=True, overrides=[2]), "overrides must be 'KEY=VALUE' strings"),
    (lambda tmp: unstable_core.validate_config("x"), "a config is a table"),
    (lambda tmp: unstable_core.load_config(None), "a config path is a string or a path"),
    (lambda tmp: unstable_core.build_component("buffer", "step", "x"), "options are a table"),
    (lambda tmp: unstable_core.build_component("buffer", "step", plugins=1), "plugins must be a PluginSystem"),
    (lambda tmp: unstable_core.build({"name": "t", "train_envs": ["TicTacToe-v0-train"], "x": _deep(5000)}), "nest too deeply"),
])
def test_a_bad_argument_to_the_python_api_is_an_unstable_error(tmp_path, call, message):
    with pytest.raises(unstable_core.UnstableError, match=message):
        call(tmp_path)


def test_no_overrides_may_be_none(tmp_path):
    assert unstable_core.build("examples/tournament.toml", overrides=None, run_dir=tmp_path / "r") is not None


def test_a_run_result_carries_its_checkpoints_ratings_and_history_and_reads_short(make_plugin_system, tmp_path, capsys):
    system = make_plugin_system(toy_plugin)
    cfg = toy_config(training={"learning_steps": 4, "batch_size": 8, "save_every": 2, "eval_every": 2},
                     trackers=[{"name": "jsonl"}, {"name": "console"}])
    result = unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system, quiet=True)
    assert capsys.readouterr().err == ""  # quiet: no console tracker, no set-up lines
    assert [c.version for c in result.checkpoints] == [2, 4] and all(c.uid == f"ckpt-{c.version}" for c in result.checkpoints)
    assert all((tmp_path / "r" / "checkpoints" / c.uid).is_dir() for c in result.checkpoints)
    registry = json.loads((tmp_path / "r" / "registry.json").read_text())
    assert result.ratings == {m["uid"]: m["rating"] for m in registry["models"] if m.get("rating")} and result.ratings
    train = result.train_records()
    assert [r.step for r in train] == [1, 2, 3, 4] and all(r.batch_steps > 0 for r in train)
    text = repr(result)
    assert text.startswith("RunResult(completed, 4 learner steps, ") and "2 checkpoints" in text and len(text) < 200
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(unstable_core.UnstableError, match="needs pandas"):
            result.to_pandas()
    else:
        frame = result.to_pandas()
        assert list(frame["step"]) == [r.step for r in result.eval_records] and len(result.to_pandas("train")) == 4


def test_ratings_records_hold_the_pairs_that_played_since_the_one_before(make_plugin_system, tmp_path, monkeypatch):
    """A ratings record (one a step in sync mode) carries only the pairs whose counts changed, with
    their counts so far: a population of hundreds of checkpoints has tens of thousands of pairs."""
    from unstable_core.runtime.driver.reporter import Reporter

    every: list[list[dict]] = []  # the registry's whole list of pairs at each record
    summary = Reporter.summary

    async def summary_and_all_pairs(self):
        await summary(self)
        every.append((await self.run.roles.league.snapshot())["pairs"])

    monkeypatch.setattr(Reporter, "summary", summary_and_all_pairs)
    system = make_plugin_system(toy_plugin)
    cfg = toy_config(training={"learning_steps": 8, "batch_size": 8, "eval_every": 4},
                     collection={"mode": "sync", "num_train_games": 8, "num_eval_games": 8, "eval_games": 16})
    unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system, quiet=True)
    lines = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    ratings = [r for r in lines if r["type"] == "ratings"]
    assert len(ratings) >= 8
    latest: dict[tuple[str, str], dict] = {}
    left_out = 0
    assert len(every) == len(ratings)
    for record, whole in zip(ratings, every):
        counts = {key: p["games"] for key, p in latest.items()}
        assert all(counts.get((p["a"], p["b"])) != p["games"] for p in record["pairs"])  # only what changed
        left_out += len(counts.keys() - {(p["a"], p["b"]) for p in record["pairs"]})
        latest.update(((p["a"], p["b"]), p) for p in record["pairs"])
        assert sorted(latest.values(), key=lambda p: (p["a"], p["b"])) == whole  # and all that did
    registry = json.loads((tmp_path / "r" / "registry.json").read_text())
    assert sorted(latest.values(), key=lambda p: (p["a"], p["b"])) == registry["pairs"]
    assert left_out > 0  # the checkpoints of earlier steps stopped playing (self-play: the latest in both seats)
