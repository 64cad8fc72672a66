import random

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
        training={"learning_steps": 3, "batch_size": 8},
        opponents=[],
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
