"""What a run refuses, ``config check`` and the start of a run refuse first: one line naming the
key, exit status 2, before a model loads or a game is played."""

from __future__ import annotations

import pytest

import unstable_core
from unstable_core import UnstableError
from unstable_core.testing import toy_config, toy_plugin

KUHN = "examples/kuhn-tiny.toml"


def test_config_check_refuses_a_batch_larger_than_the_buffer(cli):
    """kuhn-tiny draws batches of 128 steps: a buffer of 64 could never give one (the run said
    so only once its models had loaded)."""
    proc = cli("config", "check", KUHN, "--set", "buffer.capacity=64")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "buffer.capacity = 64 is smaller than training.batch_size = 128" in lines[0]
    accepted = cli("config", "check", KUHN, "--set", "buffer.capacity=128")
    assert accepted.returncode == 0, accepted.stderr


def test_the_capacity_check_reads_the_built_buffer(make_plugin_system):
    """The line comes from the buffer as built (its ``capacity``), so a buffer plugin's own
    capacity counts; a tournament draws no batch and is not asked."""
    from unstable_core.config_check import factory_problems
    from unstable_core.runtime.plan import make_plan

    system = make_plugin_system(toy_plugin)
    small = unstable_core.validate_config(toy_config(buffer={"name": "step", "capacity": 7}, training={"batch_size": 8}))
    problems = factory_problems(make_plan(small, system, "", "c.toml"), system)
    assert problems == ["c.toml: buffer.capacity = 7 is smaller than training.batch_size = 8: a batch could never be "
                        "drawn; raise buffer.capacity or lower training.batch_size"]
    fits = unstable_core.validate_config(toy_config(buffer={"name": "step", "capacity": 8}, training={"batch_size": 8}))
    assert factory_problems(make_plan(fits, system, "", "c.toml"), system) == []


@pytest.mark.parametrize("name", ["state", "checkpoints"])
def test_a_run_directory_whose_state_is_a_file_is_refused_before_the_run(make_plugin_system, tmp_path, name):
    """A snapshot goes in RUN_DIR/state/, a checkpoint in RUN_DIR/checkpoints/: a file there
    failed the run at its first snapshot; now the start refuses it, naming it, and writes nothing."""
    system = make_plugin_system(toy_plugin)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / name).write_text("not a folder")
    cfg = toy_config(training={"learning_steps": 2, "batch_size": 8})
    with pytest.raises(UnstableError) as info:
        unstable_core.run(cfg, run_dir=run_dir, plugins=system)
    message = str(info.value)
    assert "\n" not in message and f"{run_dir / name} is a file" in message
    assert sorted(p.name for p in run_dir.iterdir()) == [name]  # nothing written
    (run_dir / name).unlink()
    assert unstable_core.run(cfg, run_dir=run_dir, plugins=system).status == "completed"


TOURNAMENT = 'name = "t"\ntrain_envs = ["TicTacToe-v0-train"]\nopponents = ["random-valid", "greedy"]\n[model_sampler]\nname = "fixed"\n'


@pytest.mark.parametrize("section,env,message", [
    ("train_envs", '{ env_id = "ConnectFour-v0-train", kwargs = { num_rows = 0 } }',
     "train_envs.0: env 'ConnectFour-v0-train' with kwargs {'num_rows': 0} fails on its first move: IndexError"),
    ("eval_envs", '{ env_id = "SimpleNegotiation-v0-train", kwargs = { max_turns = "x" } }',
     "eval_envs.0: env 'SimpleNegotiation-v0-train' with kwargs {'max_turns': 'x'} fails on its first move: TypeError"),
])
def test_env_kwargs_that_break_the_first_move_are_refused_by_config_check(cli, tmp_path, section, env, message):
    """Such kwargs pass make and reset, and every game of the run failed on its first move; the
    check now makes each env as a run does and plays one move."""
    config = tmp_path / "t.toml"
    config.write_text(f"{section} = [{env}]\n" + TOURNAMENT.replace('train_envs = ["TicTacToe-v0-train"]\n', "" if
                                                                      section == "train_envs" else 'train_envs = ["TicTacToe-v0-train"]\n'))
    proc = cli("config", "check", str(config))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_env_kwargs_that_play_are_accepted(cli, tmp_path):
    config = tmp_path / "t.toml"
    config.write_text(TOURNAMENT.replace('train_envs = ["TicTacToe-v0-train"]',
                                         'train_envs = [{ env_id = "ConnectFour-v0-train", kwargs = { num_rows = 4 } }]'))
    proc = cli("config", "check", str(config))
    assert proc.returncode == 0, proc.stderr


def test_config_check_checks_the_config_once(monkeypatch, capsys):
    """``config check`` builds its plan once: ``check_run`` (every component's, env's and
    model's own checks) and the option lookups behind it run one time each."""
    import unstable_core.config_check as config_check
    import unstable_core.runtime.plan as plan
    from unstable_core.cli import main

    calls = {"check_run": 0, "resolve_components": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(plan, "check_run", counted("check_run", config_check.check_run))
    monkeypatch.setattr(config_check, "check_run", counted("check_run", config_check.check_run))
    monkeypatch.setattr(config_check, "resolve_components", counted("resolve_components", config_check.resolve_components))
    main(["config", "check", KUHN])
    assert "ok (17 components" in capsys.readouterr().out
    assert calls == {"check_run": 1, "resolve_components": 1}
