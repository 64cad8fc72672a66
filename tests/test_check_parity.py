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
