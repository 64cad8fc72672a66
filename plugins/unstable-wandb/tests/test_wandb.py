"""The wandb tracker in offline mode: the offline run's own file is read back and must hold what
the run logged (metrics.jsonl is the independent record of the same run)."""

import json
from pathlib import Path

import pytest

import unstable_core
import unstable_wandb.plugin
from unstable_core import hookimpl
from unstable_core.testing import TrackerContract, toy_config, toy_plugin
from unstable_wandb.offline import read_offline_runs as read_files
from unstable_wandb.tracker import RUN_ID_FILE

WANDB = ("wandb", unstable_wandb.plugin)


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))  # nothing of the user's
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


class TestWandbContract(TrackerContract):
    plugin = unstable_wandb.plugin
    name = "wandb"
    options = {"mode": "offline"}


def read_offline_runs(directory):
    """The offline runs under ``directory``, read once wandb's service has written them out:
    ``run.finish()`` returns before the service has flushed the run's file (read too early, the
    history was missing in one CI run), ``wandb.teardown()`` waits for it."""
    import wandb

    wandb.teardown()
    return read_files(directory)


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def wandb_config(**options):
    return {"name": "wandb", "mode": "offline", "project": "unstable-test", "group": "g", "tags": ["a", "b"], **options}


def test_offline_run_holds_the_logged_history(make_plugin_system, tmp_path):
    run_dir = tmp_path / "run"
    cfg = toy_config(trackers=[{"name": "jsonl"}, wandb_config(table_every_s=0.001)],
                     collection={"num_train_games": 8, "num_eval_games": 8, "eval_games": 16, "transcripts": 0.5},
                     training={"learning_steps": 6, "batch_size": 16, "eval_every": 3})
    result = unstable_core.run(cfg, run_dir=run_dir, plugins=make_plugin_system(toy_plugin, WANDB))
    assert result.status == "completed"
    (run,) = read_offline_runs(run_dir)
    records = lines(run_dir / "metrics.jsonl")

    assert run.run_id == json.loads((run_dir / RUN_ID_FILE).read_text())["id"] and run.project == "unstable-test"
    assert run.exit_code == 0
    assert run.config["name"] == "toy" and run.config["training"]["learning_steps"] == 6
    assert run.config["plugins"] == {p["name"]: p["version"] for p in records[0]["plugins"]} and "wandb" in run.config["plugins"]
    assert [h["_step"] for h in run.history] == list(range(len(run.history)))  # W&B's own step never goes back

    # train records on the learner-step axis, values as logged
    trains = [r for r in records if r["type"] == "train"]
    assert [(row["learner_step"], v) for row, v in run.series("train/p_best")] == [(r["step"], r["p_best"]) for r in trains]
    assert [v for _, v in run.series("train/staleness_mean")] == [r["staleness_mean"] for r in trains]

    # eval per (env, model, opponent): in a training run the model is the policy at that step
    evals = [r for r in records if r["type"] == "eval"]
    logged = run.series("eval/PickBest-v0/policy/random-valid/win_rate")
    assert [(row["learner_step"], v) for row, v in logged] == [(r["step"], r["win_rate"]) for r in evals]
    assert [r["step"] for r in evals] == [0, 3, 6]
    played = [v for _, v in run.series("eval/PickBest-v0/policy/random-valid/checkpoint_step")]
    assert played == [int(r["model"].split("-")[-1]) if r["model"].startswith("ckpt-") else 0 for r in evals]

    # collection and ratings on the games axis, which never decreases
    games = [row["games"] for row, _ in run.series("collection/games_per_s")]
    assert games == sorted(games) and games[-1] == records[-1]["games"]
    assert run.series("collection/train/PickBest-v0/win_rate_so_far") and run.series("ratings/random-valid/score")
    ratings = [r for r in records if r["type"] == "ratings"]
    assert [v for _, v in run.series("ratings/random-valid/games")] == [r["model_games"]["random-valid"] for r in ratings]

    # the transcripts table grows by increments: every turn of every sampled game, once
    increments = [row for row in run.history if row.get("transcripts/_type") == "incremental-table-file"]
    assert len(increments) >= 2
    transcripts = lines(run_dir / "games" / "train.jsonl") + lines(run_dir / "games" / "eval.jsonl")
    rows = []
    for inc in increments:
        table = json.loads((run.path.parent / "files" / inc["transcripts/path"]).read_text())
        assert table["columns"] == ["step", "mode", "env", "seed", "player", "model", "opponent", "prompt", "completion",
                                    "action", "reward", "outcome"]
        rows += [dict(zip(table["columns"], r)) for r in table["data"]]
    assert sorted((r["mode"], r["seed"], r["player"], r["action"]) for r in rows) == sorted(
        (g["mode"], g["seed"], t["player_id"], t["action"]) for g in transcripts for t in g["turns"])
    assert {r["mode"] for r in rows} == {"train", "eval"}


def test_learner_tokens_per_s_and_the_table_cap(make_plugin_system, tmp_path):
    from unstable_core import build_component
    from unstable_core.records import EndRecord, TrainRecord, TranscriptRecord, TranscriptTurn

    tracker = build_component("tracker", "wandb", {"mode": "offline", "max_table_rows": 3}, plugins=make_plugin_system(WANDB),
                              run_dir=str(tmp_path))
    tracker.log(TrainRecord(step=1, staleness_mean=0.0, staleness_max=0.0, batch_steps=4.0, train_tokens=300.0, update_s=1.5))
    turn = TranscriptTurn(player_id=0, observation="obs", completion="\\boxed{[A]}", action="[A]", format_ok=True, invalid=False)
    for seed in range(3):  # 2 turns each: the cap of 3 rows stops adding after the second game
        tracker.log(TranscriptRecord(game_idx=seed, mode="train", env_id="E", seed=seed, rewards={0: 1.0, 1: -1.0}, outcome="win",
                                     seats=[], turns=[turn, turn.model_copy(update={"player_id": 1})]))
    tracker.log(EndRecord(status="interrupted"))
    tracker.close()
    (run,) = read_offline_runs(tmp_path)
    assert [v for _, v in run.series("train/learner_tokens_per_s")] == [200.0]
    assert run.exit_code == 130
    (table,) = [row for row in run.history if "transcripts/path" in row]
    data = json.loads((run.path.parent / "files" / table["transcripts/path"]).read_text())["data"]
    assert [(r[3], r[4], r[10]) for r in data] == [(0, 0, 1.0), (0, 1, -1.0), (1, 0, 1.0), (1, 1, -1.0)]


def test_a_failed_run_finishes_its_wandb_run_with_a_failure(make_plugin_system, tmp_path):
    class Breaks:
        @hookimpl
        def unstable_batch_end(self, ctx):
            raise RuntimeError("broken on purpose")

    cfg = toy_config(trackers=[wandb_config()], training={"learning_steps": 4, "batch_size": 16, "eval_every": 0})
    job = unstable_core.build(cfg, run_dir=tmp_path / "run", plugins=make_plugin_system(toy_plugin, WANDB, ("breaks", Breaks())))
    with pytest.raises(unstable_core.ComponentError, match="broken on purpose"):
        job.start()
    (run,) = read_offline_runs(tmp_path / "run")
    assert run.exit_code == 1


def test_a_resumed_run_goes_on_in_the_same_wandb_run(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin, WANDB)
    cfg = toy_config(trackers=[wandb_config()], collection={"mode": "sync", "num_train_games": 8, "num_eval_games": 8, "eval_games": 16},
                     training={"learning_steps": 2, "batch_size": 16, "eval_every": 0, "save_every": 1})
    assert unstable_core.run(cfg, run_dir=tmp_path / "run", plugins=system).status == "completed"
    resumed = unstable_core.run(None, run_dir=tmp_path / "run", plugins=system, resume=True,
                                overrides=["training.learning_steps=4"])
    assert resumed.status == "completed" and resumed.learner_steps == 4
    first, second = read_offline_runs(tmp_path / "run")
    assert first.run_id == second.run_id
    assert [row["learner_step"] for row, _ in first.series("train/p_best")] == [1, 2]
    assert [row["learner_step"] for row, _ in second.series("train/p_best")] == [3, 4]


def test_bad_options_are_one_config_error(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin, WANDB)
    with pytest.raises(unstable_core.ConfigError, match=r"trackers\.0\.mode"):
        unstable_core.build(toy_config(trackers=[{"name": "wandb", "mode": "sometimes"}]), run_dir=tmp_path / "r", plugins=system)


def test_exact_policy_metrics_are_logged_per_env_and_model(tmp_path):
    """An eval record's ``policy`` (exploitability and friends) goes to ``policy/<env>/<model>/...``:
    the model's figure on the env, logged once whatever the opponent row carried it."""
    from unstable_core import EvalRecord, build_component, get_plugin_system

    options = {k: v for k, v in wandb_config().items() if k != "name"}  # `name` picks the tracker in a config
    tracker = build_component("tracker", "wandb", options, plugins=get_plugin_system(), run_dir=str(tmp_path))
    for opponent in ("random-valid", "cfr"):
        tracker.log(EvalRecord(step=0, time=0.0, env_id="openspiel/kuhn_poker", model="tiny", opponent=opponent, games=10,
                               win_rate=0.5, draw_rate=0.0, loss_rate=0.5, invalid_rate=0.0, format_rate=1.0, mean_return=-0.25,
                               policy={"exploitability": 0.48, "nash_conv": 0.96},
                               mixtures={"uniform": {"exploitability": 0.21, "members": 5.0}, "meta": {"exploitability": 0.12}}))
    tracker.close()
    (run,) = read_offline_runs(tmp_path)
    assert [v for _, v in run.series("policy/openspiel_kuhn_poker/tiny/exploitability")] == [0.48, 0.48]
    assert [v for _, v in run.series("policy/openspiel_kuhn_poker/tiny/nash_conv")] == [0.96, 0.96]
    # the population's mixtures (collection.eval_mixtures)
    assert [v for _, v in run.series("policy/openspiel_kuhn_poker/uniform-mixture/exploitability")] == [0.21, 0.21]
    assert [v for _, v in run.series("policy/openspiel_kuhn_poker/uniform-mixture/members")] == [5.0, 5.0]
    assert [v for _, v in run.series("policy/openspiel_kuhn_poker/meta-mixture/exploitability")] == [0.12, 0.12]
    # the mean return (chips) per opponent row, beside the win rate
    assert [v for _, v in run.series("eval/openspiel_kuhn_poker/tiny/random-valid/mean_return")] == [-0.25]


def test_the_logprob_gap_is_charted_and_the_summary_keeps_its_largest(tmp_path):
    """``train/logprob_gap_mean`` and ``_max`` are charted per update; the run's summary (the runs
    table) holds the largest, not the last update's (which may have measured nothing)."""
    from unstable_core import TrainRecord, build_component, get_plugin_system

    options = {k: v for k, v in wandb_config().items() if k != "name"}
    tracker = build_component("tracker", "wandb", options, plugins=get_plugin_system(), run_dir=str(tmp_path))
    gaps = [(1, 3e-7, 2e-6), (2, 0.1, 0.4), (3, 1e-6, 5e-6), (4, None, None)]
    for step, mean, largest in gaps:
        measured = {} if mean is None else {"logprob_gap_mean": mean, "logprob_gap_max": largest}
        tracker.log(TrainRecord(step=step, time=float(step), staleness_mean=0.0, staleness_max=0.0, batch_steps=8.0,
                                logprob_gap_tokens=0.0 if mean is None else 40.0, **measured))
    tracker.close()
    (run,) = read_offline_runs(tmp_path)
    assert [(row["learner_step"], v) for row, v in run.series("train/logprob_gap_mean")] == [(1, 3e-7), (2, 0.1), (3, 1e-6)]
    assert [v for _, v in run.series("train/logprob_gap_tokens")] == [40.0, 40.0, 40.0, 0.0]
    assert run.summary["train/logprob_gap_mean"] == {"max": 0.1}
    assert run.summary["train/logprob_gap_max"] == {"max": 0.4}


def test_a_restart_is_logged_with_its_count_and_role(tmp_path):
    """A ``restart`` record (an executor restarted a role) goes to ``executor/restarts`` and
    ``executor/restarted/<role>``; the summary's count to ``collection/restarts``."""
    from unstable_core import RestartRecord, SummaryRecord, build_component, get_plugin_system

    options = {k: v for k, v in wandb_config().items() if k != "name"}
    tracker = build_component("tracker", "wandb", options, plugins=get_plugin_system(), run_dir=str(tmp_path))
    tracker.log(RestartRecord(step=3, time=1.0, role="rollout-0", cause="killed by SIGKILL", pid=12, restarts=1, max_restarts=3))
    tracker.log(SummaryRecord(step=3, time=2.0, games=40, games_per_s=20.0, failed=0, restarts=1))
    tracker.close()
    (run,) = read_offline_runs(tmp_path)
    assert [v for _, v in run.series("executor/restarts")] == [1]
    assert [v for _, v in run.series("executor/restarted/rollout-0")] == [1]
    assert [v for _, v in run.series("collection/restarts")] == [1]


def test_its_files_stay_in_the_run_directory_and_the_display_name_is_an_option(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin, WANDB)
    for bad in ("/tmp/elsewhere", "../out", "a/../../b"):
        with pytest.raises(unstable_core.ConfigError, match="not a folder inside the run directory"):
            unstable_core.build(toy_config(trackers=[wandb_config(dir=bad)]), run_dir=tmp_path / "r", plugins=system)
    run_dir = tmp_path / "run"
    cfg = toy_config(trackers=[wandb_config(dir="tracking/wandb-files", run_name="seed zero")], training={"learning_steps": 2})
    assert unstable_core.run(cfg, run_dir=run_dir, plugins=system).status == "completed"
    (run,) = read_offline_runs(run_dir / "tracking" / "wandb-files")
    assert run.display_name == "seed zero" and run.exit_code == 0
    assert not (run_dir / "wandb").exists()
    (default,) = read_offline_runs(_default_run(system, tmp_path))
    assert default.display_name == "toy/default"


def _default_run(system, tmp_path):
    run_dir = tmp_path / "default"
    unstable_core.run(toy_config(trackers=[wandb_config()], training={"learning_steps": 1}), run_dir=run_dir, plugins=system)
    return run_dir


def test_wandb_prints_nothing_unless_verbose(make_plugin_system, tmp_path, monkeypatch, capfd):
    """W&B's own lines ("W&B syncing is set to offline...", "Run data is saved locally...") are
    printed only with `unstable --verbose` (UNSTABLE_VERBOSE=1)."""
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    monkeypatch.delenv("UNSTABLE_VERBOSE", raising=False)
    cfg = toy_config(trackers=[wandb_config()], training={"learning_steps": 2, "batch_size": 8})
    unstable_core.run(cfg, run_dir=tmp_path / "quiet", plugins=make_plugin_system(toy_plugin, WANDB))
    read_offline_runs(tmp_path / "quiet")
    captured = capfd.readouterr()
    assert "wandb:" not in captured.err + captured.out, captured.err
    monkeypatch.setenv("UNSTABLE_VERBOSE", "1")
    unstable_core.run(cfg, run_dir=tmp_path / "verbose", plugins=make_plugin_system(toy_plugin, WANDB))
    read_offline_runs(tmp_path / "verbose")
    assert "wandb:" in capfd.readouterr().err


def _transcript(seed, rewards, seats, outcome="finished", mode="eval"):
    from unstable_core.records import TranscriptRecord, TranscriptTurn

    turns = [TranscriptTurn(player_id=p, observation="obs", completion="c", action="[A]", format_ok=True, invalid=False)
             for p in range(len(seats))]
    return TranscriptRecord(step=2, time=0.0, game_idx=seed, mode=mode, env_id="openspiel/kuhn_poker", seed=seed,
                            seats=[{"player_id": p, "uid": uid, "version": None} for p, uid in enumerate(seats)],
                            rewards=rewards, outcome=outcome, turns=turns)


def test_transcript_rows_carry_mode_model_opponent_and_outcome(tmp_path):
    """Each row says which game mode it came from, which model played the turn, against whom, and
    how the game ended for that player (win/draw/loss by the rewards; `failed` for a failed game)."""
    from unstable_core import EndRecord, build_component, get_plugin_system

    options = {k: v for k, v in wandb_config().items() if k != "name"}
    tracker = build_component("tracker", "wandb", options, plugins=get_plugin_system(), run_dir=str(tmp_path))
    games = [
        _transcript(0, {0: 2.0, 1: -2.0}, ["ckpt-4", "cfr"]),
        _transcript(1, {0: 0.0, 1: 0.0}, ["policy", "ckpt-2"], mode="train"),
        _transcript(2, {0: -1.0, 1: 1.0, 2: 0.5}, ["a", "b", "c"]),
        _transcript(3, {}, ["ckpt-4", "random-valid"], outcome="failed"),
    ]
    for game in games:
        tracker.log(game)
    tracker.log(EndRecord(status="completed"))
    tracker.close()
    (run,) = read_offline_runs(tmp_path)
    (logged,) = [row for row in run.history if "transcripts/path" in row]
    table = json.loads((run.path.parent / "files" / logged["transcripts/path"]).read_text())
    rows = [dict(zip(table["columns"], r)) for r in table["data"]]
    assert [(r["mode"], r["seed"], r["player"], r["model"], r["opponent"], r["outcome"]) for r in rows] == [
        ("eval", 0, 0, "ckpt-4", "cfr", "win"), ("eval", 0, 1, "cfr", "ckpt-4", "loss"),
        ("train", 1, 0, "policy", "ckpt-2", "draw"), ("train", 1, 1, "ckpt-2", "policy", "draw"),
        ("eval", 2, 0, "a", "b, c", "loss"), ("eval", 2, 1, "b", "a, c", "win"), ("eval", 2, 2, "c", "a, b", "loss"),
        ("eval", 3, 0, "ckpt-4", "random-valid", "failed"), ("eval", 3, 1, "random-valid", "ckpt-4", "failed"),
    ]
    assert [r["reward"] for r in rows[:2]] == [2.0, -2.0]


def test_an_offline_run_ends_with_its_wandb_sync_command_once(make_plugin_system, tmp_path, capfd):
    """An offline run prints the exact `wandb sync DIR` that uploads it, once, at its end; DIR is
    the offline run's own folder (the one holding run-<id>.wandb). Online or disabled: no line."""
    cfg = toy_config(trackers=[wandb_config()], training={"learning_steps": 2, "batch_size": 8})
    assert unstable_core.run(cfg, run_dir=tmp_path / "run", plugins=make_plugin_system(toy_plugin, WANDB)).status == "completed"
    (run,) = read_offline_runs(tmp_path / "run")
    err = capfd.readouterr().err
    commands = [line for line in err.splitlines() if "wandb sync" in line]
    assert len(commands) == 1, err
    assert commands[0].endswith(f"wandb sync {run.path.parent}")
    assert run.path.name == f"run-{run.run_id}.wandb"

    cfg = toy_config(trackers=[wandb_config(mode="disabled")], training={"learning_steps": 1, "batch_size": 8})
    assert unstable_core.run(cfg, run_dir=tmp_path / "off", plugins=make_plugin_system(toy_plugin, WANDB)).status == "completed"
    assert "wandb sync" not in capfd.readouterr().err
