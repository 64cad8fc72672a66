"""The local executor passes the executor contract (against itself: the mechanics of the kit)."""

from unstable_core.testing import ExecutorContract


class TestLocalExecutor(ExecutorContract):
    name = "local"


class _Handles:
    """Role handles an executor might hand out by mistake."""


def _executor_plugin(start):
    from unstable_core import ExecutorSpec, hookimpl

    class Broken:
        def start(self, plan):
            return start(plan)

        def shutdown(self):
            pass

    class Plugin:
        @hookimpl
        def unstable_executors(self):
            return [ExecutorSpec(name="broken", summary="Returns bad handles", factory=lambda o, ctx: Broken())]

    return Plugin()


def _local_handles(plan, system):
    from unstable_core.builtin.executor_local import LocalExecutor

    return LocalExecutor(system).start(plan)


def test_an_executor_whose_handles_break_the_contract_fails_the_run_naming_it(make_plugin_system, tmp_path):
    """The driver checks what ``start()`` returns against the role protocols before any game:
    garbage, a handle that lacks a method, a plain function where a coroutine is awaited; and a
    ``start()`` that raises is named too."""
    import dataclasses

    import pytest

    import unstable_core
    from unstable_core import PluginError
    from unstable_core.testing import toy_config, toy_plugin

    class SyncBuffer:  # the buffer role's methods as plain functions
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def size(self):
            return 0

    def raising(plan, system):
        raise RuntimeError("no cluster here")

    cases = {
        "start() raised RuntimeError: no cluster here": raising,
        "returned dict; expected RoleHandles": lambda plan, system: {},
        "league: _Handles has no add_checkpoint()": lambda plan, system: dataclasses.replace(
            _local_handles(plan, system), league=_Handles()),
        "buffer: SyncBuffer.size is not a coroutine function": lambda plan, system: dataclasses.replace(
            _local_handles(plan, system), buffer=SyncBuffer(_local_handles(plan, system).buffer)),
    }
    for i, (message, start) in enumerate(cases.items()):
        holder = {}
        plugin = _executor_plugin(lambda plan: start(plan, holder["system"]))
        system = holder["system"] = make_plugin_system(toy_plugin, ("broken-executor", plugin))
        cfg = toy_config(executor={"name": "broken"}, training={"learning_steps": 1})
        with pytest.raises(PluginError) as info:
            unstable_core.run(cfg, run_dir=tmp_path / str(i), plugins=system)
        assert "executor 'broken' from plugin 'broken-executor'" in str(info.value) and message in str(info.value)


def test_a_restart_an_executor_reports_is_a_record_a_line_and_a_count(make_plugin_system, tmp_path, capsys):
    """``report_restart`` from a role handle (here the first play call of a local rollout): a
    ``restart`` record in metrics.jsonl, one console line, the summary's and the end line's count,
    and the dashboard shows it."""
    import json

    import unstable_core
    from unstable_core.dashboard.state import DashboardState
    from unstable_core.dashboard.view import render_text
    from unstable_core.executors import report_restart
    from unstable_core.testing import toy_config, toy_plugin

    class Flaky:
        """A rollout whose worker 'dies' once: the executor reports it and goes on."""

        def __init__(self, inner):
            self.inner, self.died = inner, False

        def __getattr__(self, name):
            return getattr(self.inner, name)

        async def play(self, specs):
            if not self.died:
                self.died = True
                report_restart("rollout-0", "killed by SIGKILL", 1, 3, pid=4321)
            return await self.inner.play(specs)

    def start(plan):
        import dataclasses

        handles = _local_handles(plan, holder["system"])
        return dataclasses.replace(handles, rollouts=[Flaky(handles.rollouts[0])])

    holder = {}
    system = holder["system"] = make_plugin_system(toy_plugin, ("broken-executor", _executor_plugin(start)))
    cfg = toy_config(executor={"name": "broken"}, training={"learning_steps": 2},
                     trackers=[{"name": "jsonl"}, {"name": "console", "live": False}])
    result = unstable_core.run(cfg, run_dir=tmp_path / "run", plugins=system)
    assert result.status == "completed"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (restart,) = [r for r in records if r["type"] == "restart"]
    assert restart == {"type": "restart", "step": 0, "time": restart["time"], "role": "rollout-0", "cause": "killed by SIGKILL",
                       "pid": 4321, "restarts": 1, "max_restarts": 3}
    summaries = [r for r in records if r["type"] == "summary"]
    assert summaries[-1]["restarts"] == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "died" in line]
    assert lines == ["[toy] rollout-0 (pid 4321) died at step 0: killed by SIGKILL; restarted (1 of 3)"], err
    assert "1 restarted" in [line for line in err.splitlines() if "completed" in line][0]
    state = DashboardState()
    for r in records:
        state.add(r)
    assert "rollout-0 (pid 4321) died at step 0" in render_text(state, 100)


def test_a_restart_reported_outside_a_run_is_logged(caplog):
    from unstable_core.executors import report_restart

    report_restart("rollout-1", "exit code 1", 2, 3)
    assert "rollout-1 died (exit code 1); restarting it (2 of 3)" in caplog.text
