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
