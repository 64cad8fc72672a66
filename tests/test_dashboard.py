"""The dashboard: the console tracker and `unstable watch` draw the same state from the metrics
records. Rendered from the records of a real run (tests/data: 12 learner steps of kuhn-tiny with
the trueskill rater, summaries thinned) at 80 and 120 columns, as plain lines, and followed live."""

import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from unstable_core.dashboard.lines import progress_line
from unstable_core.dashboard.present import Presenter
from unstable_core.dashboard.state import DashboardState
from unstable_core.dashboard.view import learner_text, render_text
from unstable_core.dashboard.watch import MetricsFollower
from unstable_core.progress import set_sink, task

RECORDED = Path(__file__).parent / "data" / "kuhn-tiny-metrics.jsonl"


def recorded():
    return [json.loads(line) for line in RECORDED.read_text().splitlines()]


def folded(records):
    state = DashboardState()
    for r in records:
        state.add(r)
    return state


def row_of(text, *words):
    rows = [line for line in text.splitlines() if all(w in line.split() for w in words)]
    assert len(rows) == 1, (words, rows)
    return rows[0].split()


@pytest.mark.parametrize("width", [80, 120])
def test_recorded_run_renders_what_it_holds_within_the_width(width):
    records = recorded()
    text = render_text(folded(records), width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert lines[0].startswith("unstable · kuhn-tiny · completed")
    assert "step 12/12 100%" in text and "games 552" in text

    # collection: the last summary's per-env totals, anchor seat
    train = [r for r in records if r["type"] == "summary"][-1]["envs"]["train"]["KuhnPoker-v0-train"]
    assert row_of(text, "train", "KuhnPoker-v0-train")[2:] == [
        f"{train['games']:,}", *(f"{train[k]:.2f}" for k in ("win_rate", "draw_rate", "loss_rate", "invalid_rate", "format_rate")),
        f"{train['mean_turns']:.1f}"]

    # evaluations: one row per (env, model, opponent), the model shown
    for r in (r for r in records if r["type"] == "eval"):
        cells = row_of(text, r["model"], r["opponent"], str(r["step"]))
        assert cells[-4:] == [f"{r[k]:.2f}" for k in ("win_rate", "draw_rate", "loss_rate", "invalid_rate")]

    # ratings: best mu first, each with mu ± sigma and a bar that shrinks down the board
    ratings = [r for r in records if r["type"] == "ratings"][-1]
    order = sorted(ratings["ratings"], key=lambda uid: -ratings["ratings"][uid]["mu"])
    board = [line for line in lines if "±" in line]
    assert [line.split()[1] for line in board] == order[: len(board)] and len(board) == min(10, len(order))
    best = ratings["ratings"][order[0]]
    assert f"{best['mu']:.1f} ± {best['sigma']:.1f}" in board[0]
    bars = [line.count("█") for line in board]
    assert bars == sorted(bars, reverse=True) and bars[0] > bars[-1]

    # the heatmap: games between the top models, both ways round
    pairs = {(p["a"], p["b"]): p["games"] for p in ratings["pairs"]}
    top = order[: 8 if width >= 120 else 6]
    heat = {}  # uid -> its row of counts (at 120 columns the row follows a ratings row on the same line)
    for line in lines:
        cells = (line.rsplit("█", 1)[-1] if "±" in line else line).split()
        if len(cells) == 2 + len(top) and cells[:2] == [str(top.index(cells[1]) + 1) if cells[1] in top else "", cells[1]]:
            heat[cells[1]] = cells[2:]
    assert list(heat) == top
    for x in top:
        for j, y in enumerate(top):
            expected = "·" if x == y else str(pairs.get((x, y), pairs.get((y, x), 0)))
            assert heat[x][j] == expected, (x, y)


def test_wide_terminal_puts_ratings_beside_the_heatmap():
    text = render_text(folded(recorded()), 120)
    assert any("±" in line and "·" in line.split("±")[1] for line in text.splitlines())
    assert not any("±" in line and line.count("·") for line in render_text(folded(recorded()), 80).splitlines())


def test_rates_eta_and_leaderboard_from_hand_made_records():
    state = folded([
        {"type": "start", "name": "x", "mode": "train", "total": 10, "run_dir": "r"},
        {"type": "summary", "time": 0.0, "games": 0, "games_per_s": 0.0, "failed": 0, "generated_tokens": 0},
        {"type": "train", "step": 1, "time": 10.0, "train_tokens": 100, "update_s": 0.5, "staleness_mean": 0.0},
        {"type": "summary", "step": 1, "time": 10.0, "games": 50, "games_per_s": 5.0, "failed": 2,
         "failures": {"TimeoutError": 2}, "generated_tokens": 1000},
        {"type": "train", "step": 3, "time": 30.0, "train_tokens": 300, "update_s": 0.5, "staleness_mean": 0.0},
        {"type": "ratings", "step": 3, "time": 30.0, "games": 50, "ratings": {"a": {"score": 0.25}, "b": {"score": 0.75}},
         "pairs": [{"a": "a", "b": "b", "games": 7}]},
    ])
    assert state.games_per_s() == pytest.approx(5.0) and state.generation_tokens_per_s() == pytest.approx(100.0)
    assert state.learner_tokens_per_s() == pytest.approx(400.0)  # 400 tokens in 1 s of updates
    assert state.eta_s() == pytest.approx((30 - 10) / (3 - 1) * (10 - 3))
    assert state.leaderboard(5) == [("b", 0.75, None), ("a", 0.25, None)]
    assert state.matches(["a", "b"]) == {("a", "b"): 7, ("b", "a"): 7}
    line = progress_line(state)
    assert "step 3/10 30%" in line and "eta 1:10" in line and "failures: 2 (TimeoutError 2)" in line
    frame = render_text(state, 80)
    assert "failures: 2 · TimeoutError 2" in frame and "games 50 · 5.00 games/s · gen 100 tok/s · learner 400 tok/s" in frame


def test_the_learner_line_shows_the_figures_the_learner_reports_prefix_sharing_included():
    state = folded([
        {"type": "start", "name": "x", "mode": "train", "total": 10, "run_dir": "r"},
        {"type": "train", "step": 4, "time": 1.0, "loss": -0.25, "train_tokens": 768, "forward_tokens": 7895.0,
         "prefix_share": 0.6754, "update_s": 1.02},
    ])
    assert learner_text(state) == "learner step 4: loss -0.25 · tokens 768 · shared 68% · update 1.02 s"
    assert learner_text(folded([{"type": "start", "name": "x", "mode": "train", "total": 10, "run_dir": "r"}])) == ""


def test_the_learner_line_keeps_the_latest_measured_logprob_gap_and_flags_it_past_the_tolerance():
    start = {"type": "start", "name": "x", "mode": "train", "total": 10, "run_dir": "r",
             "config": {"training": {"logprob_gap_tolerance": 0.01}}}
    measured = {"type": "train", "step": 1, "time": 1.0, "loss": 0.5, "logprob_gap_tokens": 396.0,
                "logprob_gap_mean": 2.938e-07, "logprob_gap_max": 1.609e-06}
    between = {"type": "train", "step": 2, "time": 2.0, "loss": 0.25, "logprob_gap_tokens": 0.0}  # no step of version 1
    assert learner_text(folded([start, measured, between])) == (
        "learner step 2: loss 0.25 · logprob gap 2.9e-07 (max 1.6e-06, step 1)")
    off = {**measured, "step": 3, "logprob_gap_mean": 0.1, "logprob_gap_max": 0.25}
    assert learner_text(folded([start, measured, off])).endswith("logprob gap 0.1 (max 0.25, step 3) over 0.01")


def test_plain_lines_are_whole_one_per_evaluation_and_a_last_line():
    out = io.StringIO()
    presenter = Presenter(live=False, every_s=10.0, file=out)
    records = recorded()
    for r in records:
        presenter.add(r)
    presenter.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[kuhn-tiny] started: 12 steps in runs/kuhn-tiny"
    evals = [r for r in records if r["type"] == "eval"]
    assert [line for line in lines if line.startswith("eval step")] == [
        f"eval step {r['step']} {r['env_id']} {r['model']} vs {r['opponent']}: win {r['win_rate']:.2f} draw "
        f"{r['draw_rate']:.2f} loss {r['loss_rate']:.2f} invalid {r['invalid_rate']:.2f} ({r['games']} games)" for r in evals]
    progress = [line for line in lines if " step " in line and line.startswith("[kuhn-tiny] step")]
    assert len(progress) >= 3  # every 10 s of run time (the run took 112 s; summaries are thinned)
    assert lines[-1] == "[kuhn-tiny] completed: 552 games, 12 learner steps, 0 failed"


def test_follower_reads_whole_lines_and_starts_over_when_the_log_is_cut_back(tmp_path):
    path = tmp_path / "metrics.jsonl"
    follower = MetricsFollower(path)
    assert follower.read() == ([], False)  # not there yet
    path.write_text('{"type": "a"}\n{"type": "b"')  # the second line is still being written
    assert follower.read() == ([{"type": "a"}], False)
    with open(path, "a") as fh:
        fh.write('}\n')
    assert follower.read() == ([{"type": "b"}], False)
    path.write_text('{"type": "c"}\n')  # a resumed run cut the log back to its snapshot
    assert follower.read() == ([{"type": "c"}], True)


def _line_reader(stream):
    """Lines of ``stream`` through a queue, so that waiting for one has a time limit."""
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lambda: lines.get(timeout=60)


def test_watch_follows_a_run_until_its_end_record(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = recorded()
    log = run_dir / "metrics.jsonl"
    log.write_text(json.dumps(records[0]) + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "unstable_core.cli", "watch", str(run_dir), "--plain", "--refresh", "0.05"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        env={**os.environ, "COLUMNS": "80"},
    )
    try:
        readline = _line_reader(proc.stdout)
        assert readline().startswith("[kuhn-tiny] started: 12 steps")
        with open(log, "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in records[1:-1])
        for _ in range(len(records)):  # progress lines come first
            if (line := readline()).startswith("eval step"):
                break
        assert line.startswith("eval step 0 KuhnPoker-v0-train base vs random-valid")
        assert proc.poll() is None, "the run has not ended: watch goes on"
        with open(log, "a") as fh:
            fh.write(json.dumps(records[-1]) + "\n")
        assert proc.wait(timeout=60) == 0
        out = [readline().rstrip("\n")]
        while not out[-1].startswith("[kuhn-tiny] completed"):
            out.append(readline().rstrip("\n"))
        assert out[-1] == "[kuhn-tiny] completed: 552 games, 12 learner steps, 0 failed"
    finally:
        proc.kill()
        proc.wait()


def test_watch_once_prints_the_frame_and_bad_run_dirs_are_one_line(tmp_path, cli):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(RECORDED.read_text())
    r = cli("watch", str(run_dir), "--once", env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("unstable · kuhn-tiny · completed")
    assert "latest evaluations" in r.stdout and "matches (top models)" in r.stdout
    quiet = tmp_path / "quiet"  # a run without the jsonl tracker: watching it would wait forever
    quiet.mkdir()
    (quiet / "config.json").write_text(json.dumps({"config": {"trackers": [{"name": "console"}]}}))
    for bad, says in ((tmp_path / "nope", "no such run directory"), (tmp_path, "holds no run"),
                      (quiet, "writes no metrics.jsonl (its trackers: console)")):
        r = cli("watch", str(bad))
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and says in r.stderr and "Traceback" not in r.stderr


def test_progress_lines_without_a_dashboard_and_into_a_live_one(capsys):
    with task("warm start", total=3) as t:
        for _ in range(3):
            t.advance()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "unstable: warm start ..." and err[-1].startswith("unstable: warm start: done in ")

    presenter = Presenter(live=True, file=io.StringIO())  # registers itself as the sink
    try:
        seen = []
        with task("loading tiny-abc", total=2) as t:
            t.advance()
            seen.append(presenter.state.setup)
            assert "loading tiny-abc 1/2 · " in render_text(presenter.state, 80).splitlines()[0]
        assert seen == [t] and presenter.state.setup is None
    finally:
        presenter.close()
    assert set_sink(None) is None  # closing gave the sink back


def test_set_up_progress_tells_its_rate_and_time_left_and_the_clock_moves(monkeypatch, capsys):
    """A slow set-up step (a fake clock: 2 s a step) is reported with its rate, time left and
    time spent, as plain lines and in the live header; the live elapsed clock runs between records."""
    import unstable_core.dashboard.state as state_module
    import unstable_core.progress as progress

    now = [1000.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    with task("warm start", total=5) as t:
        for _ in range(2):
            now[0] += 2.0
            t.advance()
        assert t.text() == "2/5 · 0.50/s · eta 0:06 · 0:04"
        now[0] += 7.0  # a slow step: a line every EVERY_S seconds
        t.advance()
    err = capsys.readouterr().err.splitlines()
    assert "unstable: warm start: 3/5 · 0.27/s · eta 0:07 · 0:11" in err, err
    assert err[-1] == "unstable: warm start: done in 11.0 s"

    state = folded(recorded()[:1])  # the start record only: no step yet
    state.status, state.clock = "running", (now[0], 0.0)
    monkeypatch.setattr(state_module.time, "monotonic", lambda: now[0])
    with task("building tiny model", total=None) as t:
        state.setup = t
        now[0] += 65.0
        first = render_text(state, 80).splitlines()[0]
        assert "building tiny model 1:05" in first, first
        assert "elapsed 1:05" in render_text(state, 80), "the run's clock moves before any record"


def test_evaluations_with_exact_policy_metrics_show_the_exploitability():
    """An evaluation that carries policy metrics gets an exploitability column in the table and
    the figure on its plain line; without them neither changes."""
    from unstable_core.dashboard.lines import eval_line

    records = recorded()
    plain = render_text(folded(records), 120)
    assert "exploit" not in plain
    last = max((r for r in records if r["type"] == "eval"), key=lambda r: r["step"])
    extra = {**last, "step": last["step"] + 1, "env_id": "openspiel/kuhn_poker", "policy": {"exploitability": 0.3333}}
    text = render_text(folded([*records, extra]), 120)
    assert "exploit" in text and "0.3333" in text
    assert eval_line(extra).endswith("games, exploitability 0.3333)") and "exploitability" not in eval_line(last)
    # the population's mixtures (collection.eval_mixtures): a column each, and on the line
    mixed = {**extra, "step": extra["step"] + 1, "mixtures": {"uniform": {"exploitability": 0.2121}, "meta": {"exploitability": 0.1234}}}
    text = render_text(folded([*records, mixed]), 160)
    assert "unif mix" in text and "meta mix" in text and "0.2121" in text and "0.1234" in text
    assert eval_line(mixed).endswith("exploitability 0.3333, meta mixture 0.1234, uniform mixture 0.2121)")


def test_sections_show_once_they_have_data():
    state = folded(recorded()[:1])  # the start record only
    text = render_text(state, 80)
    assert "collection" not in text and "latest evaluations" not in text and "ratings" not in text
    full = render_text(folded(recorded()), 80)
    assert "collection (anchor seat)" in full and "latest evaluations" in full and "ratings" in full


def test_an_evaluation_shows_its_games_in_a_live_header_and_prints_no_lines(make_plugin_system, tmp_path, capsys):
    import unstable_core
    from unstable_core.testing import toy_config, toy_plugin

    system = make_plugin_system(toy_plugin)
    cfg = toy_config(training={"learning_steps": 1, "batch_size": 8}, collection={"eval_games": 24, "num_eval_games": 4})
    seen = []
    previous = set_sink(lambda t, finished: seen.append((t.description, t.done, t.total, finished)))
    try:
        unstable_core.run(cfg, run_dir=tmp_path / "live", plugins=system)
    finally:
        set_sink(previous)
    base = [s for s in seen if s[0] == "evaluating base"]
    assert base[0] == ("evaluating base", 0, 24, False) and base[-1][1:] == (24, 24, True)
    assert [s[1] for s in base] == sorted(s[1] for s in base)
    capsys.readouterr()
    unstable_core.run(cfg, run_dir=tmp_path / "plain", plugins=system)
    assert "evaluating" not in capsys.readouterr().err


def _eval(step, env, model, opponent):
    return {"type": "eval", "step": step, "time": float(step), "env_id": env, "model": model, "opponent": opponent, "games": 10,
            "win_rate": 0.5, "draw_rate": 0.0, "loss_rate": 0.5, "invalid_rate": 0.0, "format_rate": 1.0}


@pytest.mark.parametrize("width", [80, 120])
def test_the_evaluations_table_says_how_many_rows_it_cut(width):
    """Eight evaluation rows are shown (the newest); the table's title says how many more there are."""
    start = {"type": "start", "name": "x", "mode": "tournament", "total": 10, "run_dir": "r"}
    opponents = [f"opp-{i}" for i in range(11)]
    state = folded([start, *(_eval(i, "kuhn", "m", o) for i, o in enumerate(opponents))])
    text = render_text(state, width)
    shown = [o for o in opponents if any(o in line.split() for line in text.splitlines())]
    assert sorted(shown) == sorted(opponents[-8:])  # the newest eight
    assert "+3 more" in text and max(len(line) for line in text.splitlines()) <= width
    assert "more" not in render_text(folded([start, *(_eval(i, "kuhn", "m", o) for i, o in enumerate(opponents[:8]))]), width)


@pytest.mark.parametrize("width", [80, 120])
def test_ratings_show_each_models_games_and_how_many_models_they_cut(width):
    ratings = {f"m{i}": {"mu": 20.0 + i, "sigma": 2.0} for i in range(12)}
    games = {f"m{i}": 100 + 7 * i for i in range(12)}
    state = folded([{"type": "start", "name": "x", "mode": "tournament", "total": 10, "run_dir": "r"},
                    {"type": "ratings", "step": 0, "time": 1.0, "games": 500, "ratings": ratings, "model_games": games}])
    text = render_text(state, width)
    assert max(len(line) for line in text.splitlines()) <= width
    for rank, i in enumerate(range(11, 1, -1), 1):  # the best ten, each with its games after its rating
        assert ratings_row(text, rank, f"m{i}") == [str(rank), f"m{i}", f"{20.0 + i:.1f}", "±", "2.0", str(games[f"m{i}"])]
    assert "ratings (+2 more)" in text and "m1" not in text.split() and "m0" not in text.split()
    older = render_text(folded([{"type": "ratings", "step": 0, "time": 1.0, "games": 5, "ratings": {"a": {"score": 0.5}}}]), width)
    assert ratings_row(older, 1, "a") == ["1", "a", "0.50"]  # records without counts: no column
    assert "more" not in older


def ratings_row(text, rank, uid):
    """The cells of a ratings row (the one with a bar), bar and what stands beside it left out."""
    (line,) = [line for line in text.splitlines() if line.startswith(f"{rank} {uid} ") and "█" in line]
    return line.split("█")[0].split()


def test_ratings_records_carry_each_models_games_as_the_registry_counts_them(make_plugin_system, tmp_path):
    import unstable_core
    from unstable_core.testing import toy_config, toy_plugin

    cfg = toy_config(training={"learning_steps": 3, "batch_size": 8, "save_every": 1})
    assert unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=make_plugin_system(toy_plugin)).status == "completed"
    registry = json.loads((tmp_path / "r" / "registry.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["type"] == "ratings"][-1]
    assert last["model_games"] == {m["uid"]: m["games"] for m in registry["models"]} and sum(last["model_games"].values()) > 0
    text = render_text(folded(records), 120)
    for uid, n in last["model_games"].items():
        if last["ratings"].get(uid):
            rank = [row[0] for row in folded(records).leaderboard(None)].index(uid) + 1
            assert ratings_row(text, rank, uid)[-1] == f"{n:,}", (uid, n, text)
