"""Evaluation records carry the evaluated model's mean return (the env's final reward: chips for
poker), beside its win rates; the final table and plain lines show it."""

import json
import subprocess
import sys

import pytest

from unstable_core import ModelRef
from unstable_core.runtime.driver.stats import OutcomeAggregator
from unstable_core.testing import sample_result


def test_the_mean_return_is_the_models_mean_final_reward_by_hand():
    seats = [ModelRef(uid="m", kind="base"), ModelRef(uid="o")]
    agg = OutcomeAggregator(anchor="m")
    for rewards in ({0: 2.0, 1: -2.0}, {0: -1.0, 1: 1.0}, {0: 0.5, 1: -0.5}):
        agg.add(sample_result(rewards=rewards, seats=seats))
    swapped = [ModelRef(uid="o"), ModelRef(uid="m", kind="base")]
    agg.add(sample_result(rewards={0: 3.0, 1: -3.0}, seats=swapped))  # the model in seat 1: -3
    (record,) = agg.records(step=0)
    assert record.mean_return == pytest.approx((2.0 - 1.0 + 0.5 - 3.0) / 4)
    assert record.win_rate == pytest.approx(2 / 4)
    tournament = OutcomeAggregator(anchor=None)
    tournament.add(sample_result(rewards={0: 2.0, 1: -2.0}, seats=seats))
    by_model = {r.model: r.mean_return for r in tournament.records(step=0)}
    assert by_model == {"m": 2.0, "o": -2.0}


def test_an_aggregators_state_from_before_returns_loads_and_goes_on():
    seats = [ModelRef(uid="m", kind="base"), ModelRef(uid="o")]
    old = {"anchor": "m", "stats": [[["PickBest-v0", "m", "o"], [2, 1, 0, 1, 0, 2, 2, 0]]]}  # 8 columns, no return sum
    agg = OutcomeAggregator(anchor=None)
    agg.load_state_dict(old)
    agg.add(sample_result(rewards={0: 1.0, 1: -1.0}, seats=seats))
    (record,) = agg.records(step=0)
    assert record.games == 3 and record.win_rate == pytest.approx(2 / 3) and record.mean_return == pytest.approx(1 / 3)


def test_a_tournaments_records_and_final_lines_carry_the_mean_return(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "unstable_core.cli", "run", "examples/tournament.toml", "--run-dir", str(run),
                           "--set", "collection.tournament_games=120", "--set", "collection.transcripts=1.0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    games = [json.loads(line) for line in (run / "games" / "tournament.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"type":"eval"' in line]
    assert len(games) == 120 and evals
    for r in evals:
        returns = [g["rewards"][str(s["player_id"])] for g in games if g["env_id"] == r["env_id"] and g["outcome"] != "failed"
                   for s in g["seats"] if s["uid"] == r["model"] and any(o["uid"] == r["opponent"] for o in g["seats"])]
        assert len(returns) == r["games"] and r["mean_return"] == pytest.approx(sum(returns) / len(returns), abs=1e-12)
        assert f"return {r['mean_return']:+.2f}" in done.stdout  # the final lines (stdout apart from stderr)


def test_the_final_table_on_a_terminal_shows_the_return_and_exploitability_where_computed(monkeypatch):
    import io

    from rich.console import Console

    import unstable_core.cli as cli
    from unstable_core.records import EvalRecord

    out = io.StringIO()
    monkeypatch.setattr(cli, "rich_console", lambda: Console(file=out, force_terminal=True, width=120, color_system=None))
    common = {"step": 4, "time": 0.0, "games": 200, "win_rate": 0.6, "draw_rate": 0.0, "loss_rate": 0.4,
              "invalid_rate": 0.0, "format_rate": 1.0}
    records = [EvalRecord(env_id="openspiel/kuhn_poker", model="ckpt-4", opponent="random-valid", mean_return=0.1234,
                          policy={"exploitability": 0.2468}, **common),
               EvalRecord(env_id="KuhnPoker-v0-train", model="ckpt-4", opponent="random-valid", mean_return=-0.25, **common),
               EvalRecord(**{**common, "step": 0}, env_id="openspiel/kuhn_poker", model="base", opponent="random-valid")]
    cli.print_results(records)
    text = out.getvalue()
    assert "return" in text and "exploitability" in text and "openspiel/kuhn_poker" in text
    assert "+0.12" in text and "0.2468" in text and "-0.25" in text and "base" not in text  # the last step only


def test_the_live_dashboards_evaluations_show_the_return_where_records_carry_it():
    from unstable_core.dashboard.state import DashboardState
    from unstable_core.dashboard.view import render_text

    base = {"type": "eval", "time": 1.0, "env_id": "openspiel/kuhn_poker", "model": "ckpt-4", "opponent": "random-valid",
            "games": 200, "win_rate": 0.49, "draw_rate": 0.0, "loss_rate": 0.51, "invalid_rate": 0.0, "format_rate": 1.0}
    old = DashboardState()
    old.add({**base, "step": 4})  # a record from before mean_return
    assert "return" not in render_text(old, 120)
    state = DashboardState()
    state.add({**base, "step": 4, "mean_return": 0.1834})
    text = render_text(state, 80)
    assert "return" in text and "+0.18" in text
