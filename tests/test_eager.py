"""``shielded``: asyncio.shield's guarantee, and no task for a coroutine that never suspends."""

from __future__ import annotations

import asyncio

import pytest

from unstable_core.runtime.game.eager import shielded


def test_a_coroutine_that_never_suspends_runs_in_the_callers_task():
    seen = []

    async def body():
        seen.append(asyncio.current_task())
        return 7

    async def main():
        value = await shielded(body())
        return value, asyncio.current_task()

    value, caller = asyncio.run(main())
    assert value == 7 and seen == [caller]


def test_after_suspending_it_gets_what_it_awaits_and_returns_its_value():
    async def body(fut):
        first = await fut
        await asyncio.sleep(0)
        return first + await asyncio.sleep(0, result=1)

    async def main():
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, 41)
        return await shielded(body(fut))

    assert asyncio.run(main()) == 42


def test_errors_reach_the_caller_before_and_after_suspending():
    async def at_once():
        raise KeyError("now")

    async def later():
        await asyncio.sleep(0)
        raise KeyError("later")

    async def main(coro):
        await shielded(coro)

    with pytest.raises(KeyError, match="now"):
        asyncio.run(main(at_once()))
    with pytest.raises(KeyError, match="later"):
        asyncio.run(main(later()))


def test_a_failed_future_is_raised_inside_the_coroutine_which_may_handle_it():
    async def body(fut):
        try:
            await fut
        except ValueError as exc:
            return f"handled {exc}"

    async def main():
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_exception, ValueError("boom"))
        return await shielded(body(fut))

    assert asyncio.run(main()) == "handled boom"


def test_cancelling_the_caller_lets_the_coroutine_finish():
    done = []

    async def body(release):
        done.append("started")
        await release
        await asyncio.sleep(0)
        done.append("finished")

    async def main():
        release = asyncio.get_running_loop().create_future()
        caller = asyncio.ensure_future(shielded(body(release)))
        await asyncio.sleep(0)  # the caller runs the body up to its first suspension
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        assert done == ["started"]
        release.set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert done == ["started", "finished"]


class _TaskBound:
    """An inference backend whose ``generate`` is tied to the task it runs in (``asyncio.timeout``,
    as the openai client's cancel scopes are): it records that task."""

    def __init__(self, answers_at_once: bool) -> None:
        self.answers_at_once = answers_at_once

    @__import__("unstable_core").hookimpl
    def unstable_inference_backends(self):
        from unstable_core.builtin.inference_scripted import ScriptedInference
        from unstable_core.components import InferenceSpec

        tasks = self.tasks = []

        class Backend(ScriptedInference):
            async def generate(self, request):
                tasks.append(asyncio.current_task())
                async with asyncio.timeout(30):
                    await asyncio.sleep(0)
                return self.complete(request)

        return [InferenceSpec(name="task-bound", summary="test", factory=lambda o, ctx: Backend(),
                              serves_checkpoints=False, answers_at_once=self.answers_at_once)]


def _tournament(make_plugin_system, tmp_path, plugin):
    import unstable_core

    cfg = {"name": "t", "train_envs": ["TicTacToe-v0-train"], "model_sampler": {"name": "fixed"},
           "opponents": [{"uid": "a", "model": "random-valid", "backend": "task-bound"}, "first-valid"],
           "collection": {"tournament_games": 24, "num_train_games": 8}}
    return unstable_core.run(cfg, run_dir=tmp_path / "run", plugins=make_plugin_system(plugin))


def test_games_of_backends_that_may_wait_each_run_in_a_task_of_their_own(make_plugin_system, tmp_path):
    plugin = _TaskBound(answers_at_once=False)
    result = _tournament(make_plugin_system, tmp_path, plugin)
    assert result.status == "completed" and result.games_played == 24
    assert len(set(plugin.tasks)) == 24  # one task a game: what the backend ties to its task is its game's


def test_scripted_games_are_played_inline(make_plugin_system, tmp_path):
    """The same backend declared ``answers_at_once`` (which it must not: it waits): each game's
    first turn runs in the task of the lane that plays it, the rest in a task of the game's own
    once it waited. 4 lanes (8 games in flight) and 24 games: 28 tasks."""
    plugin = _TaskBound(answers_at_once=True)
    result = _tournament(make_plugin_system, tmp_path, plugin)
    assert result.status == "completed" and result.games_played == 24
    assert len(set(plugin.tasks)) == 24 + 4
