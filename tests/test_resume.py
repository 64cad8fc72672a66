"""Sync mode is reproducible; runs killed (SIGKILL) at random points resume from their latest
snapshot and end as the uninterrupted run."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import pytest

import unstable_core
from unstable_core.runtime.rundir.store import KILL_IN_SNAPSHOT_ENV, read_latest
from unstable_core.testing import comparable_metrics, kill_after, restored_state, start_run, toy_config, toy_plugin
from unstable_core.testing import run_with_kills as harness_run_with_kills
from unstable_core.testing.resume import VARYING_FIELDS


def sync_config(steps: int = 20, **collection):
    return toy_config(
        training={"learning_steps": steps, "batch_size": 16, "eval_every": 10},
        model_sampler={"name": "fixed"},
        train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
        collection={"mode": "sync", "num_train_games": 8, "num_eval_games": 8, "eval_games": 40, "transcripts": 1.0, **collection},
    )


def outputs(run_dir, steps: int = 20):
    """Metrics (without what a resume adds), transcripts and the last checkpoint's table."""
    records = comparable_metrics(run_dir)
    games = [{k: v for k, v in json.loads(line).items() if k not in VARYING_FIELDS} for line in (run_dir / "games" / "train.jsonl").open()]
    return records, games, (run_dir / "checkpoints" / f"ckpt-{steps}" / "table.json").read_text()



TOY = ["unstable_core.testing:toy_plugin"]


def start(run_dir: Path, cfg: dict, resume: bool, env: dict | None = None):
    return start_run(run_dir, cfg, resume=resume, plugins=TOY, env=env)


def run_with_kills(run_dir: Path, cfg: dict, rng: random.Random, kills: int, most_events: int = 400) -> int:
    return harness_run_with_kills(run_dir, cfg, rng, kills, most_events, plugins=TOY)


KILL_STEPS = 60  # the kill tests' run: about 1.5 s, some 1,500 games


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("reference") / "r"
    unstable_core.run(sync_config(KILL_STEPS), run_dir=run_dir, plugins=unstable_core.load_plugins(extra=[("toy", toy_plugin)]))
    return outputs(run_dir, KILL_STEPS)


@pytest.mark.parametrize("seed", range(4))
def test_a_sync_run_killed_at_random_points_ends_as_the_uninterrupted_run(tmp_path, reference, seed):
    run_dir = tmp_path / "r"
    landed = run_with_kills(run_dir, sync_config(KILL_STEPS), random.Random(seed), kills=6)
    assert landed >= 4  # most kills land before the run ends (>= 20 kill points over this file)
    out = outputs(run_dir, KILL_STEPS)
    assert [r["step"] for r in out[0] if r["type"] == "train"] == list(range(1, KILL_STEPS + 1))  # each step once
    assert out == reference


def test_a_kill_during_a_snapshot_write_leaves_the_previous_one_as_latest(tmp_path, reference):
    run_dir = tmp_path / "r"
    proc = start(run_dir, sync_config(KILL_STEPS), resume=False, env={KILL_IN_SNAPSHOT_ENV: "5"})
    try:
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert (run_dir / "state" / ".tmp-step-5").is_dir()  # half-written, never named
    step, state = read_latest(run_dir)
    assert step == 4 and state["driver"]["step"] == 4
    proc = start(run_dir, sync_config(KILL_STEPS), resume=True)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert outputs(run_dir, KILL_STEPS) == reference
    assert sorted(p.name for p in (run_dir / "state").iterdir()) == ["latest", "step-59", "step-60"]  # keep_snapshots = 2


def test_an_async_run_killed_and_resumed_loses_and_repeats_no_step(tmp_path):
    cfg = sync_config(KILL_STEPS, mode="async")
    run_dir = tmp_path / "r"
    assert run_with_kills(run_dir, cfg, random.Random(7), kills=4) >= 3
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    assert [r["step"] for r in records if r["type"] == "train"] == list(range(1, KILL_STEPS + 1))


def test_an_evaluation_round_in_flight_at_a_kill_is_finished_on_resume(tmp_path):
    """Async mode: killed while the step-10 evaluation round plays (its 400 games take some 20
    updates; snapshots from step 10 on hold it with its unfinished games), the resumed run plays
    those games and reports the round once, every (env, opponent) with all its eval_games."""
    cfg = sync_config(KILL_STEPS, mode="async", eval_games=400)
    run_dir = tmp_path / "r"
    proc = start(run_dir, cfg, resume=False)
    try:
        assert kill_after(proc, 11, kinds="u")  # the 11th update comes after the snapshot of step 10
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    step, saved = read_latest(run_dir)
    rounds = saved["driver"]["eval_rounds"]
    assert step >= 10 and [r["step"] for r in rounds] == [10] and 0 < len(rounds[0]["specs"]) <= 400
    assert run_with_kills(run_dir, cfg, random.Random(0), kills=0) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    evals = [(r["step"], r["opponent"], r["games"]) for r in records if r["type"] == "eval"]
    assert [(s, g) for s, _, g in evals] == [(s, 400) for s in range(0, KILL_STEPS + 1, 10)]
    resume = next(r for r in records if r["type"] == "resume")
    assert resume["replayed"] >= len(rounds[0]["specs"])


def test_a_restored_league_buffer_and_learner_equal_the_snapshot(tmp_path):
    system = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    cfg = sync_config(6, mode="async")
    first = unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    step, saved = read_latest(tmp_path / "r")
    job = unstable_core.build(None, run_dir=tmp_path / "r", plugins=system, resume=True)
    result = job.start()  # nothing left to train: restores, evaluates, ends
    assert result.learner_steps == 6 == step
    assert result.checkpoints == first.checkpoints and first.checkpoints  # the checkpoints saved before the resume
    import asyncio

    league = asyncio.run(job.roles.league.state_dict())
    assert league["schedule_rng"] == saved["league"]["schedule_rng"]
    assert league["game_idx"] > saved["league"]["game_idx"] or league["game_idx"] == saved["league"]["game_idx"]
    learner = asyncio.run(job.roles.learner.state_dict())
    assert learner == saved["learner"]


def test_resume_refuses_what_it_cannot_continue(tmp_path):
    system = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    with pytest.raises(unstable_core.ConfigError, match="not a run directory"):
        unstable_core.run(None, run_dir=tmp_path / "none", plugins=system, resume=True)
    cfg = sync_config()
    cfg["training"] = {**cfg["training"], "learning_steps": 2, "keep_snapshots": 0}
    unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    with pytest.raises(unstable_core.UnstableError, match="holds no snapshot"):
        unstable_core.run(None, run_dir=tmp_path / "r", plugins=system, resume=True)
    with pytest.raises(unstable_core.ConfigError, match="only training.learning_steps may change"):
        unstable_core.run(None, run_dir=tmp_path / "r", plugins=system, resume=True, overrides=["training.batch_size=4"])
    other = sync_config()
    other["seed"] = 5
    with pytest.raises(unstable_core.ConfigError, match="differs from the one"):
        unstable_core.run(other, run_dir=tmp_path / "r", plugins=system, resume=True)


def test_two_sync_runs_are_identical(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    for name in ("a", "b"):
        unstable_core.run(sync_config(), run_dir=tmp_path / name, plugins=system)
    first, second = outputs(tmp_path / "a"), outputs(tmp_path / "b")
    assert first == second
    records = first[0]
    assert [r["step"] for r in records if r["type"] == "train"] == list(range(1, 21))
    assert sum(r["type"] == "summary" for r in records) == 21  # one a step and the final one: none on a timer


def test_sync_runs_of_different_seeds_differ(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    unstable_core.run(sync_config(), run_dir=tmp_path / "a", plugins=system)
    cfg = sync_config()
    cfg["seed"] = 1
    unstable_core.run(cfg, run_dir=tmp_path / "b", plugins=system)
    assert outputs(tmp_path / "a")[1] != outputs(tmp_path / "b")[1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_buffer_smaller_than_a_batch_is_refused_not_a_hang(make_plugin_system, tmp_path, mode):
    cfg = sync_config(mode=mode)
    cfg["buffer"] = {"name": "step", "capacity": 8}
    with pytest.raises(unstable_core.UnstableError, match="capacity 8 is smaller than training.batch_size 16"):
        unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=make_plugin_system(toy_plugin))


def test_cli_resume_errors_are_one_line_with_exit_status_2(cli, tmp_path):
    proc = cli("run", "--resume", str(tmp_path / "nothing"))
    assert proc.returncode == 2 and "not a run directory" in proc.stderr and "Traceback" not in proc.stderr
    proc = cli("run")
    assert proc.returncode == 2 and "--resume RUN_DIR" in proc.stderr
    done = cli("run", "examples/tournament.toml", "--run-dir", str(tmp_path / "t"), "--set", "collection.tournament_games=4")
    assert done.returncode == 0, done.stderr
    proc = cli("run", "--resume", str(tmp_path / "t"))
    assert proc.returncode == 2 and "holds no snapshot" in proc.stderr
    proc = cli("run", "--resume", str(tmp_path / "t"), "--set", "seed=3")
    assert proc.returncode == 2 and "only training.learning_steps may change" in proc.stderr


def test_builtin_stateful_components_round_trip():
    import random as random_module

    from unstable_core import Batch, ModelRef
    from unstable_core.builtin.transforms import RoleAdvantage, RoleAdvantageOptions
    from unstable_core.runtime.roles.registry import ModelRegistry
    from unstable_core.runtime.roles.rewards import RewardPipelines
    from unstable_core.testing import TabularLearner, TabularOptions, check_state_round_trip, sample_result

    def advantage(t):
        return [t({0: 1.0, 1: -1.0}, "TicTacToe-v0"), t({0: 0.0, 1: 0.0}, "KuhnPoker-v0")]

    check_state_round_trip(lambda: RoleAdvantage(RoleAdvantageOptions(), by_env=True), advantage)

    def registry():
        reg = ModelRegistry()
        for uid in ("a|b", "games"):
            reg.add(ModelRef(uid=uid, model="random-valid"))
        return reg

    def play(reg):
        result = sample_result()
        result = result.model_copy(update={"game": result.game.model_copy(update={"seats": [reg.get("a|b").ref, reg.get("games").ref]})})
        reg.record_game(result)
        return reg.snapshot()

    check_state_round_trip(registry, play)
    rng = random_module.Random(0)
    steps = [s for _ in range(3) for e in RewardPipelines().episodes(sample_result(train_seats=[0, 1])) for s in e]
    for s in steps:
        s.turn.completion_token_ids[:] = [rng.randrange(3)]
    check_state_round_trip(lambda: TabularLearner(TabularOptions(lr=0.5)), lambda t: t.update(Batch(steps=steps, learner_version=0)))


def test_after_an_async_kill_the_restored_roles_equal_the_snapshot(tmp_path):
    """Registry (ratings, counts), game counter, schedule stream, buffer and learner state right
    after restore, before any game: equal to what the snapshot holds."""
    run_dir = tmp_path / "r"
    proc = start(run_dir, sync_config(KILL_STEPS, mode="async"), resume=False)
    try:
        assert kill_after(proc, 700)  # mid-run, past several snapshots
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    step, saved, restored = restored_state(run_dir, unstable_core.load_plugins(extra=[("toy", toy_plugin)]))
    assert step > 0
    assert restored == saved
    assert restored["driver"]["step"] == step and restored["driver"]["games_played"] > 0
    league = restored["league"]
    assert league["registry"]["entries"] and any(e["games"] for e in league["registry"]["entries"])


def test_fsync_is_paid_where_a_resume_reads_and_nowhere_else(make_plugin_system, tmp_path, monkeypatch):
    """Snapshots, `state/latest`, the metrics offset they cover and `config.json` are fsynced (a
    resume reads them); the views written at start and end (plugins.json, registry.json) and a
    run without snapshots are not."""
    import os

    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    system = make_plugin_system(toy_plugin)
    unstable_core.run(sync_config(4), run_dir=tmp_path / "trained", plugins=system)
    names = set(synced)
    assert {"config.json", "metrics.jsonl", "state.json"} <= names
    assert any(n.startswith(".latest.") for n in names)  # the temp file renamed to state/latest
    assert not any("registry.json" in n or "plugins.json" in n for n in names)
    assert (tmp_path / "trained" / "registry.json").exists() and (tmp_path / "trained" / "plugins.json").exists()

    synced.clear()
    tournament = toy_config(learner=None, model=None, opponents=["random-valid", "first-valid"],
                            collection={"tournament_games": 20})
    result = unstable_core.run(tournament, run_dir=tmp_path / "tournament", plugins=system)
    assert result.games_played == 20 and synced == []


@pytest.fixture
def finished(tmp_path):
    """A finished 6-step sync toy run with snapshots."""
    run_dir = tmp_path / "r"
    cfg = sync_config(6)
    cfg["training"] = {**cfg["training"], "save_every": 2, "eval_every": 0}
    unstable_core.run(cfg, run_dir=run_dir, plugins=unstable_core.load_plugins(extra=[("toy", toy_plugin)]))
    return run_dir


def resume_error(run_dir, overrides=()):
    from unstable_core import UnstableError

    with pytest.raises(UnstableError) as info:
        unstable_core.run(None, run_dir=run_dir, resume=True, overrides=list(overrides),
                          plugins=unstable_core.load_plugins(extra=[("toy", toy_plugin)]))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_finished_run_resumed_with_more_steps_keeps_its_last_evaluation_and_plays_it_once(finished):
    """The last evaluation comes after the last update's snapshot; a snapshot after it keeps it when the
    run goes on (without it the resume cut it from the log and never played it again)."""
    plugins = unstable_core.load_plugins(extra=[("toy", toy_plugin)])

    def evals():
        records = [json.loads(line) for line in (finished / "metrics.jsonl").open()]
        return [r["step"] for r in records if r["type"] == "eval"]

    first = evals()
    assert sorted(set(first)) == [0, 6] and first.count(6) == first.count(0) > 0
    result = unstable_core.run(None, run_dir=finished, resume=True, overrides=["training.learning_steps=8"], plugins=plugins)
    assert result.status == "completed" and 6 in {r.step for r in result.eval_records}
    assert evals() == first + [8] * first.count(0)
    again = unstable_core.run(None, run_dir=finished, resume=True, overrides=["training.learning_steps=8"], plugins=plugins)
    assert again.status == "completed" and evals() == first + [8] * first.count(0)  # resumed as it was: not played twice


@pytest.mark.parametrize("damage", ["deleted", "cut"])
def test_resume_refuses_a_metrics_log_that_lost_what_the_snapshot_covers(finished, damage):
    metrics = finished / "metrics.jsonl"
    if damage == "deleted":
        metrics.unlink()
    else:
        metrics.write_bytes(metrics.read_bytes()[:200])
    message = resume_error(finished, ["training.learning_steps=8"])
    assert "metrics.jsonl holds" in message and "fewer than the" in message and "the snapshot covers" in message


def test_resume_refuses_a_metrics_log_edited_within_what_the_snapshot_covers(finished):
    """Same length, other bytes: the SHA-256 the snapshot recorded tells them apart."""
    metrics = finished / "metrics.jsonl"
    data = metrics.read_bytes()
    at = data.index(b'"step":') + len(b'"step":')
    digit = data[at : at + 1]
    assert digit.isdigit()
    metrics.write_bytes(data[:at] + (b"9" if digit != b"9" else b"8") + data[at + 1 :])
    message = resume_error(finished, ["training.learning_steps=8"])
    assert "metrics.jsonl: its first" in message and "SHA-256 differs" in message
    edited = data[:at] + (b"9" if digit != b"9" else b"8") + data[at + 1 :]
    assert metrics.read_bytes()[: len(data)] == edited  # nothing cut or rewritten (a resume cuts what lies past the snapshot)


def test_a_resumed_run_checks_what_it_appended_too(finished):
    """The digest goes on across a resume: a second resume of the same log verifies."""
    plugins = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    unstable_core.run(None, run_dir=finished, resume=True, overrides=["training.learning_steps=8"], plugins=plugins)
    result = unstable_core.run(None, run_dir=finished, resume=True, overrides=["training.learning_steps=10"], plugins=plugins)
    assert result.status == "completed" and result.learner_steps == 10


@pytest.mark.parametrize("damage", ["deleted", "cut", "edited"])
def test_repair_goes_on_with_a_damaged_metrics_log_and_says_what_it_kept(finished, damage):
    metrics = finished / "metrics.jsonl"
    data = metrics.read_bytes()
    if damage == "deleted":
        metrics.unlink()
    elif damage == "cut":
        metrics.write_bytes(data[:1000])  # mid-line
    else:
        metrics.write_bytes(data.replace(b'"toy"', b'"yot"', 1))
    plugins = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    result = unstable_core.run(None, run_dir=finished, resume=True, repair=True, overrides=["training.learning_steps=8"],
                               plugins=plugins)
    assert result.status == "completed" and result.learner_steps == 8
    records = [json.loads(line) for line in metrics.read_text().splitlines()]  # every line whole
    resume = [r for r in records if r["type"] == "resume"]
    assert len(resume) == 1 and len(resume[0]["repaired"]) == 1
    said = resume[0]["repaired"][0]
    if damage == "edited":
        assert "differ from what was written (SHA-256): kept as they are" in said
        assert metrics.read_bytes().startswith(data.replace(b'"toy"', b'"yot"', 1)[: data.index(b"\n") + 1])
    else:
        kept = 0 if damage == "deleted" else data[:1000].rfind(b"\n") + 1
        assert f"held {0 if damage == 'deleted' else 1000} of the" in said and f"its {kept} bytes of complete lines kept" in said
    assert [r["step"] for r in records if r["type"] == "train"][-2:] == [7, 8]
    # the repaired log is the log from now on: the next resume checks it and needs no repair
    again = unstable_core.run(None, run_dir=finished, resume=True, overrides=["training.learning_steps=10"], plugins=plugins)
    assert again.learner_steps == 10


def test_repair_without_resume_is_refused(tmp_path):
    from unstable_core import ConfigError

    with pytest.raises(ConfigError, match="goes with resume=True"):
        unstable_core.build(sync_config(2), run_dir=tmp_path / "r", repair=True,
                            plugins=unstable_core.load_plugins(extra=[("toy", toy_plugin)]))


@pytest.mark.parametrize("link", ["games/train.jsonl", "games"])
def test_resume_never_cuts_or_writes_transcripts_through_a_symlink(finished, tmp_path, link):
    target = finished / link
    outside = tmp_path / ("outside" + ("" if link == "games" else ".jsonl"))
    target.rename(outside)
    target.symlink_to(outside)
    before = sorted((p.name, p.read_bytes()) for p in outside.iterdir()) if link == "games" else outside.read_bytes()
    message = resume_error(finished, ["training.learning_steps=8"])
    assert "is a symbolic link" in message and link.split("/")[-1] in message
    after = sorted((p.name, p.read_bytes()) for p in outside.iterdir()) if link == "games" else outside.read_bytes()
    assert after == before


def test_resume_never_writes_through_a_symlinked_metrics_log(finished, tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes((finished / "metrics.jsonl").read_bytes())
    (finished / "metrics.jsonl").unlink()
    (finished / "metrics.jsonl").symlink_to(outside)
    before = outside.read_bytes()
    message = resume_error(finished, ["training.learning_steps=8"])
    assert "metrics.jsonl: cannot be written (it is a symbolic link)" in message
    assert outside.read_bytes() == before


@pytest.mark.parametrize("file,content,expected", [
    ("latest", '{"step": "x"}', "state/latest is unreadable"),
    ("latest", "not json", "state/latest is unreadable"),
    ("state.json", '{"step": "x", "state": {}}', "state.json is unreadable"),
    ("state.json", '{"step": 6, "state": {"driver": {"step": "six"}}}', "the snapshot of step 6 (state/step-6) is malformed"),
    ("tensors.safetensors", "garbage", "tensors.safetensors is unreadable"),
])
def test_resume_refuses_a_damaged_snapshot_in_one_line(finished, file, content, expected):
    latest = json.loads((finished / "state" / "latest").read_text())
    target = finished / "state" / "latest" if file == "latest" else finished / "state" / latest["path"] / file
    target.write_text(content)
    assert expected in resume_error(finished, ["training.learning_steps=8"])


def test_resume_refuses_fewer_steps_than_the_run_made(finished):
    assert "training.learning_steps = 4 is fewer than the 6 updates" in resume_error(finished, ["training.learning_steps=4"])


def test_the_cli_refuses_repair_without_resume(cli):
    proc = cli("run", "examples/tournament.toml", "--repair")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: --repair goes with --resume RUN_DIR"


def _components(run_dir, value):
    path = run_dir / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "components": value}))


def _latest(run_dir, value):
    (run_dir / "state" / "latest").write_text(json.dumps(value))


# (damage, what the refusal names, whether --repair goes on)
RUN_DIR_DAMAGE = {
    "latest names step -1": (lambda d: _latest(d, {"step": -1, "path": "step-6"}), "state/latest is unreadable", True),
    "latest names step x": (lambda d: _latest(d, {"step": "x", "path": "step-6"}), "state/latest is unreadable", True),
    "latest names another folder": (lambda d: _latest(d, {"step": 4, "path": "step-6"}), "state/latest is unreadable", True),
    "latest removed": (lambda d: (d / "state" / "latest").unlink(), "state/latest is missing", True),
    "snapshot folder holds another step": (
        lambda d: (d / "state" / "step-6" / "state.json").write_text(
            (d / "state" / "step-4" / "state.json").read_text()), "state/step-6/state.json is unreadable", True),
    "checkpoints removed": (lambda d: __import__("shutil").rmtree(d / "checkpoints"), "checkpoints/ckpt-2 is missing", False),
    "a checkpoint's table garbage": (lambda d: (d / "checkpoints" / "ckpt-6" / "table.json").write_text("garbage"),
                                     "checkpoints/ckpt-6/table.json: its size or SHA-256 differs", False),
    "an old checkpoint's table edited": (
        lambda d: (d / "checkpoints" / "ckpt-2" / "table.json").write_text(
            (d / "checkpoints" / "ckpt-4" / "table.json").read_text()), "checkpoints/ckpt-2/table.json: its size or SHA-256", False),
    "registry.json garbage": (lambda d: (d / "registry.json").write_text("garbage"), "registry.json is unreadable", True),
    "registry.json removed": (lambda d: (d / "registry.json").unlink(), "registry.json is missing", True),
    "components garbage": (lambda d: _components(d, "garbage"), "config.json: its components are malformed", True),
    "a component's name garbage": (lambda d: _components(d, {"learner": {"name": 5}}), "config.json: its components are malformed", True),
    "a component changed": (
        lambda d: _components(d, {**json.loads((d / "config.json").read_text())["components"],
                                  "learner": {"name": "tabular-reinforce", "lr": 0.25}}),
        "config.json: components.learner is", True),
}


@pytest.mark.parametrize("damage", list(RUN_DIR_DAMAGE))
def test_resume_refuses_every_damaged_file_it_reads_naming_it(finished, damage):
    make, named, _ = RUN_DIR_DAMAGE[damage]
    make(finished)
    before = (finished / "metrics.jsonl").read_bytes()
    assert named in resume_error(finished, ["training.learning_steps=8"])
    assert (finished / "metrics.jsonl").read_bytes() == before  # refused before anything was written


@pytest.mark.parametrize("damage", [d for d, (_, _, repairable) in RUN_DIR_DAMAGE.items() if repairable])
def test_repair_goes_on_with_what_it_can_repair_and_says_so(finished, damage):
    make, named, _ = RUN_DIR_DAMAGE[damage]
    make(finished)
    plugins = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    result = unstable_core.run(None, run_dir=finished, resume=True, repair=True, overrides=["training.learning_steps=8"],
                               plugins=plugins)
    assert result.status == "completed" and result.learner_steps == 8
    records = [json.loads(line) for line in (finished / "metrics.jsonl").read_text().splitlines()]
    resume = [r for r in records if r["type"] == "resume"]
    assert len(resume) == 1 and any(named.split(":")[0].split(" is")[0] in line for line in resume[0]["repaired"])
    assert [r["step"] for r in records if r["type"] == "train"] == list(range(1, 9))  # each step once
    # repaired for good: the next resume needs no repair
    again = unstable_core.run(None, run_dir=finished, resume=True, overrides=["training.learning_steps=10"], plugins=plugins)
    assert again.learner_steps == 10


def test_repair_cannot_bring_back_a_checkpoint(finished):
    (finished / "checkpoints" / "ckpt-6" / "table.json").write_text("garbage")
    from unstable_core import UnstableError

    with pytest.raises(UnstableError, match="ckpt-6/table.json: its size or SHA-256 differs"):
        unstable_core.run(None, run_dir=finished, resume=True, repair=True, overrides=["training.learning_steps=8"],
                          plugins=unstable_core.load_plugins(extra=[("toy", toy_plugin)]))


def test_cli_refuses_a_damaged_run_directory_with_exit_status_2(cli, tmp_path):
    run_dir = tmp_path / "t"
    done = cli("run", "examples/tournament.toml", "--run-dir", str(run_dir), "--set", "collection.tournament_games=4")
    assert done.returncode == 0, done.stderr
    _components(run_dir, "garbage")
    proc = cli("run", "--resume", str(run_dir))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert lines[-1].startswith("error: ") and "config.json: its components are malformed" in lines[-1]


def before_first_snapshot(steps: int = 200):
    """A sync toy run whose first snapshot comes at step 100."""
    cfg = sync_config(steps)
    cfg["training"] = {**cfg["training"], "save_every": 100}
    return cfg


def test_resume_of_a_run_stopped_before_its_first_snapshot_starts_it_over(tmp_path):
    run_dir = tmp_path / "r"
    proc = start(run_dir, before_first_snapshot(), resume=False)
    try:
        assert kill_after(proc, 3, kinds="u")
        proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (run_dir / "state").exists() and '"type":"train"' in (run_dir / "metrics.jsonl").read_text()
    plugins = unstable_core.load_plugins(extra=[("toy", toy_plugin)])
    result = unstable_core.run(None, run_dir=run_dir, resume=True, overrides=["training.learning_steps=6"], plugins=plugins)
    assert result.status == "completed" and result.learner_steps == 6
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["type"] == "train"] == list(range(1, 7))  # each step once
    starts = [r for r in records if r["type"] == "start"]
    assert len(starts) == 1 and starts[0]["started_over"] is True and not starts[0]["resumed"]
    reference = tmp_path / "reference"
    unstable_core.run(before_first_snapshot(6), run_dir=reference, plugins=plugins)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["ckpt-6"]
    assert outputs(run_dir, 6) == outputs(reference, 6)  # records, transcripts, table: as a run never stopped


def test_a_run_past_its_first_snapshot_whose_state_was_removed_is_not_started_over(finished):
    import shutil

    shutil.rmtree(finished / "state")
    assert "holds no snapshot" in resume_error(finished, ["training.learning_steps=8"])
    assert (finished / "checkpoints" / "ckpt-6").is_dir()  # nothing removed


CLI_CHILD = (
    "import json, os, unstable_core, unstable_core.api as api, unstable_core.cli as cli\n"
    "from unstable_core.testing import toy_plugin\n"
    "from unstable_core.testing.child import Progress\n"
    "cli.plugin_system = lambda: unstable_core.load_plugins(extra=[('toy', toy_plugin), ('progress', Progress())])\n"
    "build = api.build\n"
    "api.build = lambda config, **kw: build(json.loads(os.environ['TOY_CONFIG']) if config == 'toy' else config, **kw)\n"
    "cli.main()\n"
)


@pytest.mark.parametrize("snapshot", [False, True])
def test_ctrl_c_names_the_resume_command_and_its_snapshot_and_the_resumed_run_says_its_step(tmp_path, snapshot):
    import os
    import subprocess
    import sys

    run_dir = tmp_path / "r"
    cfg = sync_config(100000)
    cfg["training"] = {**cfg["training"], "save_every": 2 if snapshot else 50000, "eval_every": 0}
    cfg["trackers"] = [{"name": "jsonl"}, {"name": "console"}]  # plain lines off a terminal
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOY_CONFIG": json.dumps(cfg)}

    def unstable(*args):  # SIGINT back at its default in the child: a shell in the background starts children ignoring it
        return subprocess.Popen([sys.executable, "-c", CLI_CHILD, *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    proc = unstable("run", "toy", "--run-dir", str(run_dir))
    try:
        seen = 0
        while seen < 5:  # five updates: past two snapshots when they come every 2
            line = proc.stdout.readline()
            assert line, proc.stderr.read().decode()[-2000:]
            seen += line.strip() == b"u"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err.decode()[-2000:]
    step = read_latest(run_dir)[0] if snapshot else None
    assert (step is not None and step >= 4) or not snapshot
    where = f"from the snapshot of step {step}" if snapshot else "no snapshot yet: it starts over from its config.json"
    hint = f"go on with: unstable run --resume {run_dir}  ({where})"
    assert hint in err.decode().splitlines()
    proc = unstable("run", "--resume", str(run_dir), "--set", f"training.learning_steps={(step or 0) + 2}")
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    said = "resumed from step " + str(step) if snapshot else "started over from its config.json"
    assert any(said in line for line in err.decode().splitlines()), err.decode()[-2000:]


def test_a_first_snapshot_killed_before_latest_named_it_is_started_over(tmp_path):
    """Killed between the rename of its first snapshot and the write of ``state/latest``."""
    run_dir = tmp_path / "r"
    cfg = sync_config(20)
    cfg["training"] = {**cfg["training"], "save_every": 5}
    proc = start(run_dir, cfg, resume=False, env={KILL_IN_SNAPSHOT_ENV: "5"})
    try:
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    (run_dir / "state" / ".tmp-step-5").rename(run_dir / "state" / "step-5")  # what the rename would have left
    result = unstable_core.run(None, run_dir=run_dir, resume=True, overrides=["training.learning_steps=6"],
                               plugins=unstable_core.load_plugins(extra=[("toy", toy_plugin)]))
    assert result.status == "completed" and result.learner_steps == 6
    starts = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"type":"start"' in line]
    assert len(starts) == 1 and starts[0]["started_over"]
