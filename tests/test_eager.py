"""``shielded``: asyncio.shield's guarantee, and no task for a coroutine that never suspends."""

from __future__ import annotations

import asyncio

import pytest

from unstable_core.runtime.eager import eager, shielded


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
