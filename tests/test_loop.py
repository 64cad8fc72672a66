"""The loop end to end: tournaments, faults, reproducibility, training stages and hooks."""

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

import unstable_core
from unstable_core import hookimpl
from unstable_core.testing import toy_config


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_loop(system, cfg_dict, run_dir):
    """Run a config through the Python API; return (the run, its result)."""
    job = unstable_core.build(cfg_dict, run_dir=run_dir, plugins=system)
    return job, job.start()


def tournament_cfg(**kw):
    cfg = {
        "name": "t", "seed": 3,
        "train_envs": ["TicTacToe-v0-train", "KuhnPoker-v0-train"],
        "opponents": ["greedy", "random-valid", "first-valid"],
        "model_sampler": {"name": "fixed"},
        "collection": {"tournament_games": 60, "num_train_games": 8},
        "trackers": [{"name": "jsonl"}],
    }
    cfg.update(kw)
    return cfg


def test_tournament_cli_writes_run_directory(cli, tmp_path):
    run_dir = tmp_path / "run"
    proc = cli("run", "examples/tournament.toml", "--run-dir", str(run_dir), "--set", "collection.tournament_games=50",
               "--set", "collection.transcripts=1.0")
    assert proc.returncode == 0, proc.stderr
    assert {"config.json", "plugins.json", "metrics.jsonl", "registry.json", "games"} <= set(os.listdir(run_dir))
    config = json.loads((run_dir / "config.json").read_text())
    assert config["config"]["collection"]["tournament_games"] == 50
    assert config["components"]["model_sampler"]["name"] == "fixed"
    assert any(p["name"] == "core.samplers" for p in json.loads((run_dir / "plugins.json").read_text()))
    games = read_jsonl(run_dir / "games" / "tournament.jsonl")
    assert len(games) == 50
    for g in games:
        assert g["env_id"] in {"TicTacToe-v0-train", "KuhnPoker-v0-train"}
        assert [s["player_id"] for s in g["seats"]] == [0, 1] and all(s["uid"] for s in g["seats"])
        assert set(g["rewards"]) == {"0", "1"} and g["turns"]
    records = read_jsonl(run_dir / "metrics.jsonl")
    evals = [r for r in records if r["type"] == "eval"]
    assert evals
    assert not [r for r in records if r["type"] == "game"], "per-game records are opt-in (jsonl games = true)"
    envs = [r for r in records if r["type"] == "summary"][-1]["envs"]["tournament"]
    assert sum(e["games"] for e in envs.values()) == 50
    for r in evals:
        assert {"step", "env_id", "opponent", "games", "win_rate", "draw_rate", "loss_rate", "invalid_rate"} <= set(r)
        assert r["win_rate"] + r["draw_rate"] + r["loss_rate"] == pytest.approx(1.0)
    registry = json.loads((run_dir / "registry.json").read_text())
    assert sum(m["games"] for m in registry["models"]) == 100  # two seats per game


def test_garbage_seat_1000_games_no_crash_every_failure_counted(make_plugin_system, tmp_path):
    cfg = tournament_cfg(
        opponents=["garbage", "random-valid"],
        # the cap on action length is lifted so that the 5000-digit answer reaches TextArena
        collection={"tournament_games": 1000, "num_train_games": 16, "transcripts": 0.05, "max_action_chars": 10_000},
        trackers=[{"name": "jsonl", "games": True}],
    )
    loop, end = run_loop(make_plugin_system(), cfg, tmp_path / "run")
    assert end.status == "completed" and end.games_played == 1000
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    games = [r for r in records if r["type"] == "game"]
    assert len(games) == 1000
    failed = [g for g in games if g["outcome"] == "failed"]
    summary = [r for r in records if r["type"] == "summary"][-1]
    assert summary["failed"] == len(failed) == sum(summary["failures"].values())
    # the summary's per-env totals agree with the per-game records
    envs = summary["envs"]["tournament"]
    assert sum(e["games"] for e in envs.values()) == 1000 and sum(e["failed"] for e in envs.values()) == len(failed)
    for env_id, e in envs.items():
        done = [g for g in games if g["env_id"] == env_id and g["outcome"] != "failed"]
        assert e["games"] == len([g for g in games if g["env_id"] == env_id])
        assert e["win_rate"] == pytest.approx(sum(g["anchor_outcome"] == "win" for g in done) / len(done))
        assert e["invalid_rate"] == pytest.approx(sum(g["invalid"] for g in done) / len(done))
    assert failed, "the 5000-digit answer makes TextArena raise; that game must fail and be counted"
    assert all(g["error"] for g in failed) and "ValueError" in summary["failures"]
    # garbage loses by invalid moves; the valid agent never does
    reg = json.loads((tmp_path / "run" / "registry.json").read_text())
    models = {m["uid"]: m for m in reg["models"]}
    assert models["garbage"]["invalid_games"] > 800 and models["random-valid"]["invalid_games"] == 0


def test_same_seed_same_games(make_plugin_system, tmp_path):
    def transcript(d):
        run_loop(make_plugin_system(), tournament_cfg(), tmp_path / d)
        return (tmp_path / d / "games" / "tournament.jsonl").read_text()

    a, b = transcript("a"), transcript("b")
    assert a == b
    other = tournament_cfg(seed=4)
    run_loop(make_plugin_system(), other, tmp_path / "c")
    assert (tmp_path / "c" / "games" / "tournament.jsonl").read_text() != a


def test_truncation_at_max_turns(make_plugin_system, tmp_path):
    cfg = tournament_cfg(train_envs=["SimpleNegotiation-v0-train"], opponents=["random-valid", "first-valid"],
                         collection={"tournament_games": 3, "max_turns": 4}, trackers=[{"name": "jsonl", "games": True}])
    loop, _ = run_loop(make_plugin_system(), cfg, tmp_path / "run")
    games = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["type"] == "game"]
    assert [g["outcome"] for g in games] == ["truncated"] * 3
    assert all(g["num_turns"] == 4 and set(g["rewards"].values()) == {0.0} for g in games)


class Recorder:
    """Implements every lifecycle hook and records the calls."""

    def __init__(self, veto_after_start=False):
        self.calls = Counter()
        self.veto = veto_after_start
        self.batch_steps = []
        self.checkpoints = []

    @hookimpl
    def unstable_run_start(self, ctx):
        self.calls["unstable_run_start"] += 1
        assert ctx.config["name"] == "toy"

    @hookimpl
    def unstable_run_end(self, ctx):
        self.calls["unstable_run_end"] += 1
        self.end = ctx

    @hookimpl
    def unstable_game_end(self, ctx):
        self.calls["unstable_game_end"] += 1

    @hookimpl
    def unstable_batch_end(self, ctx):
        self.calls["unstable_batch_end"] += 1
        self.batch_steps.append(ctx.learner_step)

    @hookimpl
    def unstable_checkpoint_saved(self, ctx):
        self.calls["unstable_checkpoint_saved"] += 1
        self.checkpoints.append(ctx.checkpoint)
        assert os.path.exists(os.path.join(ctx.checkpoint.path, "table.json"))

    @hookimpl
    def unstable_validation_start(self, ctx):
        self.calls["unstable_validation_start"] += 1
        return False if (self.veto and ctx.learner_step > 0) else None

    @hookimpl
    def unstable_validation_end(self, ctx):
        self.calls["unstable_validation_end"] += 1
        self.records = ctx.records


def test_toy_training_learns_and_calls_every_lifecycle_hook(make_plugin_system, tmp_path):
    from unstable_core.testing import toy_plugin

    rec = Recorder()
    system = make_plugin_system(toy_plugin, rec)
    loop, end = run_loop(system, toy_config(training={"learning_steps": 12, "batch_size": 16, "eval_every": 4, "save_every": 3}), tmp_path / "run")
    assert end.status == "completed" and loop.roles.learner.learner.version == 12  # exactly N updates
    assert rec.batch_steps == list(range(1, 13))
    assert [c.version for c in rec.checkpoints] == [3, 6, 9, 12]
    assert loop.roles.league.registry.current.uid == "ckpt-12"
    assert rec.calls["unstable_run_start"] == rec.calls["unstable_run_end"] == 1
    assert rec.calls["unstable_game_end"] == end.games_played
    # evaluation before training, at 4 and 8, and at the end (12)
    evals = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["type"] == "eval"]
    assert [r["step"] for r in evals] == [0, 4, 8, 12]
    assert rec.calls["unstable_validation_start"] == rec.calls["unstable_validation_end"] == 4
    assert evals[-1]["win_rate"] >= evals[0]["win_rate"] + 0.3  # learning visibly happened
    # the filter drops zero-advantage steps (draws) before the learner sees them
    assert all(s.reward != 0 for b in loop.roles.learner.learner.batches for s in b.steps)
    trains = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["type"] == "train"]
    assert len(trains) == 12 and sum(r["dropped"] for r in trains) > 0
    assert all(r["staleness_mean"] >= 0 for r in trains)


def test_validation_veto_skips_rounds(make_plugin_system, tmp_path):
    from unstable_core.testing import toy_plugin

    rec = Recorder(veto_after_start=True)
    loop, _ = run_loop(make_plugin_system(toy_plugin, rec), toy_config(training={"learning_steps": 6, "batch_size": 8, "eval_every": 2}), tmp_path / "r")
    records = read_jsonl(tmp_path / "r" / "metrics.jsonl")
    assert [r["step"] for r in records if r["type"] == "eval"] == [0]
    assert [r["step"] for r in records if r["type"] == "eval_skipped"] == [2, 4, 6]
    assert rec.calls["unstable_validation_end"] == 1


def test_backpressure_pauses_and_resumes_collection(make_plugin_system, tmp_path):
    import asyncio

    from unstable_core.builtin.executor_local import LocalExecutor
    from unstable_core.runtime.driver.driver import Driver
    from unstable_core.runtime.driver.state import RunContext
    from unstable_core.runtime.rundir.output import RunOutput, prepare_run_dir
    from unstable_core.testing import toy_plugin

    system = make_plugin_system(toy_plugin)
    cfg = toy_config(buffer={"name": "step", "capacity": 20}, collection={"num_train_games": 4})
    plan = unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system).plan
    prepare_run_dir(plan.run_dir)
    roles = LocalExecutor(system).start(plan)
    run = RunContext(cfg=plan.config, run_dir=plan.run_dir, roles=roles, out=RunOutput(plan, system), system=system)
    league, buffer = roles.league, roles.buffer

    async def turns(n):  # let the event loop run n scheduling rounds (no wall-clock sleeping)
        for _ in range(n):
            await asyncio.sleep(0)

    async def scenario():
        collector = Driver(run, await buffer.capacity()).collector
        task = asyncio.ensure_future(collector.lanes(4, collector.next_train_specs))
        await turns(500)
        assert await buffer.size() >= 20
        started = league.game_idx
        await turns(500)
        assert league.game_idx == started, "collection went on while the buffer was full"
        assert buffer.buffer.evicted <= 4 * 2  # at most the games already in flight overflow
        evicted = buffer.buffer.evicted
        await buffer.draw(20, 0)
        collector.drained.set()
        await turns(50)
        assert league.game_idx > started, "collection did not resume after the buffer drained"
        collector.stopping = True
        collector.drained.set()
        await task
        assert buffer.buffer.evicted - evicted <= 4 * 2  # again at most one round in flight

    asyncio.run(scenario())


def test_no_filter_option_keeps_zero_advantage(make_plugin_system, tmp_path):
    from unstable_core.testing import toy_plugin

    cfg = toy_config(training={"learning_steps": 3, "batch_size": 32, "filter_zero_advantage": False}, opponents=[])
    loop, _ = run_loop(make_plugin_system(toy_plugin), cfg, tmp_path / "r")
    assert any(s.reward == 0 for b in loop.roles.learner.learner.batches for s in b.steps)


def test_env_exception_fails_game_with_reason(make_plugin_system, tmp_path):
    from unstable_core.testing import toy_plugin

    cfg = toy_config(train_envs=[{"env_id": "PickBest-v0", "kwargs": {"best": "C", "no_such_kwarg": 1}}],
                     training={"learning_steps": 1}, collection={"max_game_failures": 5},
                     trackers=[{"name": "jsonl", "games": True}])
    with pytest.raises(Exception, match="games failed"):
        run_loop(make_plugin_system(toy_plugin), cfg, tmp_path / "r")
    records = read_jsonl(tmp_path / "r" / "metrics.jsonl")
    summary = [r for r in records if r["type"] == "summary"][-1]
    failed = [r for r in records if r["type"] == "game" and r["outcome"] == "failed"]
    assert set(summary["failures"]) == {"TypeError"}
    assert summary["failures"]["TypeError"] == len(failed) >= 6  # games already in flight are counted too
    assert all("no_such_kwarg" in r["error"] for r in failed)


def test_ctrl_c_stops_cleanly_with_files_flushed(tmp_path):
    run_dir = tmp_path / "run"
    cfg = tmp_path / "long.toml"
    cfg.write_text(
        'name = "long"\ntrain_envs = ["TicTacToe-v0-train"]\nopponents = ["random-valid", "greedy"]\n'
        '[model_sampler]\nname = "fixed"\n[collection]\ntournament_games = 10000000\n'
    )
    # SIGINT back at its default in the child: a shell in the background starts children ignoring it
    proc = subprocess.Popen([sys.executable, "-c", "from unstable_core.cli import main; main()", "run", str(cfg), "--run-dir", str(run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not metrics.exists() or metrics.stat().st_size < 10_000):
            time.sleep(0.05)  # waiting for the run to have started, not for timing
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    records = read_jsonl(metrics)  # every line is complete JSON
    assert records[-1]["type"] == "end" and records[-1]["status"] == "interrupted" and records[-2]["type"] == "ratings"
    reg = json.loads((run_dir / "registry.json").read_text())
    assert sum(m["games"] for m in reg["models"]) > 0


def test_collapsed_policy_fails_clearly_instead_of_spinning(make_plugin_system, tmp_path):
    from unstable_core.testing import toy_plugin

    # a huge learning rate makes self-play all draws (both pick C) after one update
    cfg = toy_config(learner={"name": "tabular-reinforce", "lr": 1000.0}, opponents=[],
                     training={"learning_steps": 50, "batch_size": 8, "max_empty_batches": 20})
    with pytest.raises(Exception, match="zero-advantage"):
        run_loop(make_plugin_system(toy_plugin), cfg, tmp_path / "r")


def test_transcripts_are_a_seeded_sample(make_plugin_system, tmp_path):
    cfg = tournament_cfg(collection={"tournament_games": 400, "transcripts": 0.25})
    run_loop(make_plugin_system(), cfg, tmp_path / "a")
    lines = read_jsonl(tmp_path / "a" / "games" / "tournament.jsonl")
    assert 60 < len(lines) < 140
    run_loop(make_plugin_system(), cfg, tmp_path / "b")
    # the same games, whatever order the lanes finished them in (which a busy machine changes)
    again = sorted(g["game_idx"] for g in read_jsonl(tmp_path / "b" / "games" / "tournament.jsonl"))
    assert again == sorted(g["game_idx"] for g in lines)
    other = tournament_cfg(seed=4, collection={"tournament_games": 400, "transcripts": 0.25})
    run_loop(make_plugin_system(), other, tmp_path / "c")
    assert sorted(g["game_idx"] for g in read_jsonl(tmp_path / "c" / "games" / "tournament.jsonl")) != again


def test_transcript_lines_are_transcript_records(make_plugin_system, tmp_path):
    """Transcripts are written from plain values (no record built per game): each line must
    still be what ``TranscriptRecord`` documents, field for field, turns in play order."""
    from unstable_core.records import TranscriptRecord

    cfg = tournament_cfg(collection={"tournament_games": 40, "transcripts": 1.0})
    run_loop(make_plugin_system(), cfg, tmp_path / "a")
    lines = read_jsonl(tmp_path / "a" / "games" / "tournament.jsonl")
    assert len(lines) == 40
    for line in lines:
        record = TranscriptRecord.model_validate(line)
        assert record.model_dump(mode="json", exclude={"type", "time"}) == line
        assert [t["player_id"] for t in line["turns"][:2]] in ([0, 1], [1, 0])
        assert line["seats"][0].keys() == {"player_id", "uid", "version"}


def test_one_run_mixes_env_providers_by_id_prefix(make_plugin_system, tmp_path):
    """An env id 'PROVIDER/GAME' is made by that provider (options in [env_providers.PROVIDER]);
    other ids by [env]. One tournament plays both, and each game comes from its own provider."""
    from pydantic import BaseModel, ConfigDict, Field

    from unstable_core import EnvProviderSpec, hookimpl
    from unstable_core.testing import toy_plugin
    from unstable_core.testing.toy import ToyProvider

    made = []

    class PrefixOptions(BaseModel):
        model_config = ConfigDict(extra="forbid")
        tag: str = Field("", description="recorded with each env made")

    class Prefixed:
        def __init__(self, options):
            self.tag = options.tag

        def make(self, env):
            made.append((self.tag, env.env_id))
            return ToyProvider().make(env.model_copy(update={"env_id": env.env_id.split("/", 1)[1]}))

        def known_env_ids(self):
            return ["prefixed/PickBest-v0"]

    class Plugin:
        @hookimpl
        def unstable_envs(self):
            return [EnvProviderSpec(name="prefixed", summary="Toy games under a prefix", config=PrefixOptions,
                                    factory=lambda o, ctx: Prefixed(o))]

    system = make_plugin_system(toy_plugin, Plugin())
    cfg = {"name": "mix", "seed": 0, "env": {"name": "toy"}, "train_envs": ["PickBest-v0", "prefixed/PickBest-v0"],
           "env_providers": {"prefixed": {"tag": "t"}}, "opponents": ["random-valid", "first-valid"],
           "model_sampler": {"name": "fixed"}, "collection": {"tournament_games": 40, "num_train_games": 8}, "trackers": []}
    result = unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    assert result.status == "completed" and result.games_played == 40
    assert {r.env_id for r in result.eval_records} == {"PickBest-v0", "prefixed/PickBest-v0"}
    counted = {env: sum(r.games for r in result.eval_records if r.env_id == env) for env in ("PickBest-v0", "prefixed/PickBest-v0")}
    share = counted["prefixed/PickBest-v0"] / sum(counted.values())  # a tournament counts each game from both sides
    assert set(made) == {("t", "prefixed/PickBest-v0")} and len(made) == round(40 * share) > 0


def test_an_env_id_naming_an_unknown_provider_is_one_line_naming_the_id(make_plugin_system):
    import pytest

    from unstable_core import ConfigError
    from unstable_core.testing import toy_plugin

    cfg = toy_config(train_envs=["PickBest-v0", "toyy/PickBest-v0"])
    with pytest.raises(ConfigError) as info:
        unstable_core.build(cfg, plugins=make_plugin_system(toy_plugin))
    assert "train_envs.1.env_id ('toyy/PickBest-v0'): unknown env 'toyy'. Did you mean 'toy'?" in str(info.value)
