"""Per-game bookkeeping of the loop: outcomes, per-env totals, seeds, JSON lines, console view."""

import json
import math
from collections import Counter

import pytest

from unstable_core.builtin.trackers import ConsoleOptions, ConsoleTracker
from unstable_core.records import EvalRecord, SummaryRecord, TrainRecord
from unstable_core.runtime.driver.stats import CollectionStats, anchor_seat
from unstable_core.runtime.rundir.jsonio import json_line, write_json_atomic
from unstable_core.runtime.seeds import derive_seed, index_seed, unit_hash
from unstable_core.testing import sample_result
from unstable_core.types import Completion, GameResult, ModelRef, Turn


def test_outcomes_compare_each_reward_with_the_best_other():
    r = sample_result(rewards={0: 1.0, 1: 0.5, 2: 1.0}, seats=[ModelRef(uid=u) for u in "abc"])
    assert r.outcomes == {0: "draw", 1: "loss", 2: "draw"}  # a shared best is a draw
    r = sample_result(rewards={0: -1.0, 1: 2.0, 2: 0.0}, seats=[ModelRef(uid=u) for u in "abc"])
    assert r.outcomes == {0: "loss", 1: "win", 2: "loss"}
    solo = sample_result(rewards={0: 0.5}, seats=[ModelRef(uid="a")])
    assert solo.outcomes == {0: "win"}  # one player: the sign of its reward
    assert sample_result(rewards={0: -0.5}, seats=[ModelRef(uid="a")]).outcome_for(0) == "loss"


def test_made_invalid_move_looks_at_every_turn():
    r = sample_result()
    traj = r.trajectories[0]
    assert not traj.made_invalid_move
    traj.turns.append(traj.turns[0].model_copy(update={"invalid": True}))
    assert traj.made_invalid_move


def test_model_of_validates_like_the_constructor():
    data = {"text": "\\boxed{1}", "policy_version": 3}
    assert Completion.of(data) == Completion(**data)
    assert Completion.of(data).model_fields_set == Completion(**data).model_fields_set
    with pytest.raises(ValueError, match="bogus"):
        Completion.of({"text": "x", "bogus": 1})
    with pytest.raises(ValueError, match="format_ok"):
        Turn.of({"player_id": 0, "observation": "o", "prompt": "p", "completion": "c", "action": "a"})


def test_anchor_seat():
    r = sample_result(train_seats=[1])
    assert anchor_seat(r.game) == 1
    fixed = [ModelRef(uid="x"), ModelRef(uid="y")]
    assert anchor_seat(sample_result(train_seats=[], seats=fixed).game) == 0
    evaluated = [ModelRef(uid="x"), ModelRef(uid="ckpt-1", kind="checkpoint")]
    assert anchor_seat(sample_result(train_seats=[], seats=evaluated).game) == 1


def test_collection_stats_counts_from_the_anchor_side():
    stats = CollectionStats()
    stats.add(sample_result(rewards={0: 1.0, 1: -1.0}))            # anchor (seat 0) wins
    stats.add(sample_result(rewards={0: -1.0, 1: 1.0}))            # loses
    drawn = sample_result(rewards={0: 0.0, 1: 0.0})
    drawn.trajectories[0].turns[0].invalid = True                  # draws with an invalid move
    stats.add(drawn)
    stats.add(sample_result(env_id="Other-v0", rewards={0: 1.0, 1: -1.0}, train_seats=[1]))  # anchor seat 1 loses
    failed = GameResult(game=sample_result().game, outcome="failed", error="ValueError: x")
    stats.add(failed)
    snap = stats.snapshot()
    pick = snap["train"]["PickBest-v0"]
    assert pick["games"] == 4 and pick["failed"] == 1
    assert (pick["win_rate"], pick["draw_rate"], pick["loss_rate"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert pick["invalid_rate"] == pytest.approx(1 / 3) and pick["mean_turns"] == pytest.approx(2.0)
    other = snap["train"]["Other-v0"]
    assert (other["games"], other["win_rate"], other["loss_rate"]) == (1, 0.0, 1.0)
    assert CollectionStats().snapshot() == {}


def test_index_seed_and_unit_hash_are_deterministic_and_spread():
    key = derive_seed(7, "games")
    seeds = [index_seed(key, i) for i in range(20_000)]
    assert seeds == [index_seed(key, i) for i in range(20_000)]
    assert all(0 <= s < 2**31 for s in seeds) and len(set(seeds)) > 19_900
    assert seeds[:50] != [index_seed(derive_seed(8, "games"), i) for i in range(50)]
    # unit_hash: uniform on [0, 1) -- chi-square over 20 bins, 20,000 draws (df 19; 43.8 is p=0.001)
    u = [unit_hash(key, i) for i in range(20_000)]
    assert all(0.0 <= x < 1.0 for x in u)
    counts = Counter(int(x * 20) for x in u)
    chi2 = sum((counts[b] - 1000) ** 2 / 1000 for b in range(20))
    assert chi2 < 43.8


def test_json_line_is_one_json_object_a_line():
    line = json_line({"a": 1, "t": (1, 2), "nan": float("nan"), "obj": object(), 3: "int key"})
    assert line.endswith("\n") and line.count("\n") == 1
    back = json.loads(line)
    assert back["a"] == 1 and back["t"] == [1, 2] and math.isnan(back["nan"]) and back["3"] == "int key"
    assert back["obj"].startswith("<object object")
    # lone surrogates (a garbage completion) cannot be UTF-8: escaped, as json.dumps does
    text = "\udcff bad \udc80"
    assert json.loads(json_line({"completion": text}))["completion"] == text
    # a completion holding the Unicode line breaks str.splitlines splits at stays one line
    text = "wct>\x85al\u2028rel\u2029a é"
    line = json_line({"completion": text})
    assert len(line.splitlines()) == 1 and json.loads(line)["completion"] == text


def test_run_files_are_indented_json_that_reads_back_whole(tmp_path):
    data = {"ratings": {"a": float("inf"), "b": -1.5}, 3: ["\udcff lone surrogate", None, True], "order": {"z": 1, "a": 2}}
    target = tmp_path / "registry.json"
    write_json_atomic(target, data, durable=False)
    text = target.read_text()
    assert text.startswith("{\n  ")  # indented for people
    back = json.loads(text)
    assert back["ratings"] == {"a": math.inf, "b": -1.5} and back["3"] == ["\udcff lone surrogate", None, True]
    assert list(back["order"]) == ["z", "a"]  # keys in the order they were given
    write_json_atomic(target, {"x": 1})  # replaced whole
    assert json.loads(target.read_text()) == {"x": 1}
    with pytest.raises(TypeError):
        write_json_atomic(target, {"x": object()})
    assert json.loads(target.read_text()) == {"x": 1} and [p.name for p in tmp_path.iterdir()] == ["registry.json"]


def test_console_tracker_prints_whole_plain_lines_off_a_terminal(capsys):
    tracker = ConsoleTracker(ConsoleOptions(live=False, every_s=1.0))
    tracker.log(SummaryRecord(time=2.0, games=12, games_per_s=4.0, failed=1, failures={"ValueError": 1}, buffer_size=3,
                              buffer_capacity=8))
    tracker.log(TrainRecord(step=5, time=3.0, staleness_mean=0.5, staleness_max=1.0, batch_steps=8.0, loss=0.25))
    tracker.log(EvalRecord(step=5, env_id="TicTacToe-v0", model="ckpt-5", opponent="greedy", games=10, win_rate=0.5,
                           draw_rate=0.25, loss_rate=0.25, invalid_rate=0.125, format_rate=1.0))
    tracker.close()
    lines = capsys.readouterr().err.splitlines()
    assert "games 12" in lines[0] and "buffer 3/8" in lines[0] and "failures: 1 (ValueError 1)" in lines[0]
    assert "step 5" in lines[1] and "loss 0.25" in lines[1] and "staleness 0.50 (max 1)" in lines[1]
    assert lines[2] == "eval step 5 TicTacToe-v0 ckpt-5 vs greedy: win 0.50 draw 0.25 loss 0.25 invalid 0.12 (10 games)"


def test_malformed_component_value_fails_the_game_naming_the_field():
    import asyncio

    from unstable_core.builtin.env_textarena import TextArenaOptions, TextArenaProvider
    from unstable_core.builtin.inference_scripted import ScriptedInference
    from unstable_core.builtin.templates import FormatTemplate
    from unstable_core.runtime.game.runner import GameRunner
    from unstable_core.types import EnvSpec, GameSpec

    class UnsureTemplate(FormatTemplate):
        def extract(self, completion):
            action, _ = super().extract(completion)
            return action, "not sure"  # not a bool

    seats = [ModelRef(uid="a", model="random-valid"), ModelRef(uid="b", model="random-valid")]
    spec = GameSpec(game_idx=0, seed=3, env=EnvSpec(env_id="TicTacToe-v0"), seats=seats)
    good = GameRunner(TextArenaProvider(TextArenaOptions()), lambda n: FormatTemplate("{observation}"), lambda n: ScriptedInference())
    bad = GameRunner(TextArenaProvider(TextArenaOptions()), lambda n: UnsureTemplate("{observation}"), lambda n: ScriptedInference())
    ok = asyncio.run(good.play(spec))
    assert ok.outcome == "finished" and sum(len(t.turns) for t in ok.trajectories) == ok.num_turns > 4
    assert all(isinstance(t, Turn) for tr in ok.trajectories for t in tr.turns)
    failed = asyncio.run(bad.play(spec))
    assert failed.outcome == "failed" and failed.num_turns == ok.num_turns
    assert failed.error.startswith("ValidationError: trajectories.0.turns.0.format_ok:")
    assert [t.turns for t in failed.trajectories] == [[], []] and failed.rewards == {}
