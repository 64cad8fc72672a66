import random

import pytest

import unstable_core
import unstable_curriculum.plugin as plugin
from unstable_core import EnvSpec, load_plugins
from unstable_core.testing import EnvSamplerContract, toy_config, toy_plugin
from unstable_curriculum.plugin import CurriculumOptions, CurriculumSampler


class TestCurriculumConformance(EnvSamplerContract):
    plugin = plugin
    name = "curriculum"


ENVS = [EnvSpec(env_id="TicTacToe-v0"), EnvSpec(env_id="KuhnPoker-v0")]


def test_stays_on_first_env_until_mastered_then_moves_on():
    s = CurriculumSampler(CurriculumOptions(threshold=0.7, explore=0.0, tau=0.5))
    rng = random.Random(0)
    assert {s.sample(ENVS, rng).env_id for _ in range(20)} == {"TicTacToe-v0"}
    s.observe("TicTacToe-v0", 1.0)  # 0.5
    assert s.sample(ENVS, rng).env_id == "TicTacToe-v0"
    s.observe("TicTacToe-v0", 1.0)  # 0.75 >= 0.7
    assert {s.sample(ENVS, rng).env_id for _ in range(20)} == {"KuhnPoker-v0"}


def test_explore_draws_other_envs():
    s = CurriculumSampler(CurriculumOptions(explore=1.0))
    rng = random.Random(1)
    assert {s.sample(ENVS, rng).env_id for _ in range(100)} == {"TicTacToe-v0", "KuhnPoker-v0"}


def test_learns_scores_from_game_end_hook_in_a_real_run(tmp_path):
    system = load_plugins(entry_points=False, extra=[("toy", toy_plugin), ("curriculum", plugin)], strict=True)
    cfg = toy_config(
        env_sampler={"name": "curriculum", "explore": 0.0},
        train_envs=[{"env_id": "PickBest-v0", "num_players": 2}],  # one trained seat, against random-valid
        model_sampler={"name": "fixed"},
        training={"learning_steps": 3, "batch_size": 8},
    )
    job = unstable_core.build(cfg, run_dir=tmp_path / "run", plugins=system)
    job.start()
    sampler = job.roles.league.env_sampler  # it lives in the league role, which sees every game
    assert sampler.scores["PickBest-v0"] > 0.0
    # it listened through its role, not as a plugin of the process
    assert sampler not in system.pm.get_plugins()


def test_a_sync_run_killed_at_random_points_draws_the_same_envs(tmp_path):
    """The scores are saved with the league: a sync run SIGKILLed three times and resumed plays
    the same envs, game for game, as the uninterrupted run (the curriculum stays on the first env
    for some 80 of 256 games, then moves on: lost scores would show)."""
    import json

    from unstable_core.testing import run_with_kills

    cfg = toy_config(
        env_sampler={"name": "curriculum", "explore": 0.1, "tau": 0.2},
        model_sampler={"name": "fixed"},  # against random-valid the learner's score passes the threshold
        train_envs=[{"env_id": "PickBest-v0", "num_players": 2}, {"env_id": "PickBest-v1", "num_players": 2}],
        learner={"name": "tabular-reinforce", "lr": 0.3},
        training={"learning_steps": 16, "batch_size": 16, "eval_every": 8},
        collection={"mode": "sync", "num_train_games": 8, "eval_games": 8, "transcripts": 1.0},
    )
    system = load_plugins(extra=[("toy", toy_plugin)])
    unstable_core.run(cfg, run_dir=tmp_path / "full", plugins=system)
    landed = run_with_kills(tmp_path / "killed", cfg, random.Random(4), kills=3, most_events=250,
                            plugins=["unstable_core.testing:toy_plugin"])
    assert landed >= 2

    def envs(run_dir):
        games = [json.loads(line) for line in (run_dir / "games" / "train.jsonl").read_text().splitlines()]
        return [(g["game_idx"], g["env_id"]) for g in games]

    full = envs(tmp_path / "full")
    assert [e for _, e in full[:32]].count("PickBest-v0") > 24 and [e for _, e in full[-32:]].count("PickBest-v1") > 24
    assert envs(tmp_path / "killed") == full


def game(rewards, train_seats, seats=None, env_id="TicTacToe-v0"):
    from unstable_core import GameEndContext, ModelRef
    from unstable_core.testing import sample_result

    me, opp = ModelRef(uid="ckpt-3", kind="checkpoint"), ModelRef(uid="random-valid", kind="fixed")
    seats = [{"me": me, "opp": opp}[s] for s in (seats or ["me", "opp"])]
    result = sample_result(env_id=env_id, rewards=rewards, train_seats=train_seats, seats=seats)
    return GameEndContext(result=result.model_copy(update={"game": result.game.model_copy(update={"mode": "train"})}))


def test_the_score_counts_games_against_other_models_only():
    """Self-play (both seats trained, or the trained model in the other seat too) always scores
    0.5 a game, under any threshold above it: such games are not scored. A game against another
    model is scored from the trained seat's side, whichever seat that is."""
    s = CurriculumSampler(CurriculumOptions(threshold=0.7, explore=0.0, tau=0.5))
    for _ in range(20):
        s.unstable_game_end(game({0: 1.0, 1: -1.0}, train_seats=[0, 1], seats=["me", "me"]))  # both seats trained
        s.unstable_game_end(game({0: -1.0, 1: 1.0}, train_seats=[0], seats=["me", "me"]))  # mirror: itself, untrained
    assert s.scores == {}
    s.unstable_game_end(game({0: -1.0, 1: 1.0}, train_seats=[1], seats=["opp", "me"]))  # a win in seat 1
    s.unstable_game_end(game({0: 0.0, 1: 0.0}, train_seats=[0]))  # a draw in seat 0
    assert s.scores == {"TicTacToe-v0": 0.5 * (0.5 * 1.0) + 0.5 * 0.5}
    s.unstable_game_end(game({0: 1.0}, train_seats=[0], seats=["me"], env_id="Solo-v0"))  # a single player: its sign
    assert s.scores["Solo-v0"] == 0.5


def test_a_curriculum_whose_env_would_only_be_played_against_itself_is_refused():
    """An env on which every seat is the trained model (num_actors = num_players), or a run whose
    opponents are all the trained model itself (`mirror`), never scores: `config check` refuses
    it with one line naming the env sampler and the env, and exits 2."""
    for needed in ("unstable_hf", "unstable_reinforce"):  # the main job's backend and learner (the full install)
        pytest.importorskip(needed, reason="examples/kuhn-tiny.toml needs the hf and reinforce plugins")
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    cases = ((["train_envs.0.num_actors=2"], "train_envs.0 (KuhnPoker-v0-train) seats the trained model in every seat"),
             (['model_sampler={name="mirror"}'], "train_envs.0 (KuhnPoker-v0-train) is played against the trained model itself"),
             ([], None))
    for sets, expected in cases:
        args = ["config", "check", "examples/kuhn-tiny.toml", "--set", 'env_sampler={name="curriculum"}']
        for item in sets:
            args += ["--set", item]
        proc = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", *args],
                              capture_output=True, text=True, cwd=root, timeout=120)
        if expected is None:  # against fixed opponents: accepted
            assert proc.returncode == 0, proc.stderr
            continue
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and expected in lines[0] and "env_sampler" in lines[0], proc.stderr
