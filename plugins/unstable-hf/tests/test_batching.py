"""The batcher that gathers the games' requests into generate calls (``unstable_hf.batching``),
with a fake ``serve`` in place of a model."""

import asyncio

import pytest

from unstable_core import Completion, GenerationRequest, ModelRef
from unstable_hf.batching import RequestBatcher

REF = ModelRef(uid="base", kind="base", backend="hf", model="m")


def request(prompt: str) -> GenerationRequest:
    return GenerationRequest(model=REF, prompt=prompt)


def echo(calls: list[list[str]]):
    def serve(requests):
        prompts = [r.prompt for r in requests]
        calls.append(prompts)
        if "boom" in prompts:
            raise RuntimeError("the model failed")
        return [Completion(text=p.upper()) for p in prompts]
    return serve


def by_letter(pending):
    """One call per first letter of the prompt, in order of first arrival."""
    groups: dict[str, list] = {}
    for pair in pending:
        groups.setdefault(pair[0].prompt[0], []).append(pair)
    return list(groups.values())


def test_requests_that_arrive_together_are_served_in_calls_as_cut_and_each_gets_its_own_answer():
    calls: list[list[str]] = []
    batcher = RequestBatcher(echo(calls), by_letter, wait_ms=200, max_size=64)

    async def main():
        return await asyncio.gather(*(batcher.submit(request(p)) for p in ["a1", "b1", "a2", "b2", "a3"]))

    outs = asyncio.run(main())
    assert [o.text for o in outs] == ["A1", "B1", "A2", "B2", "A3"]
    assert calls == [["a1", "a2", "a3"], ["b1", "b2"]]
    batcher.close()


def test_max_size_caps_a_batch():
    calls: list[list[str]] = []
    batcher = RequestBatcher(echo(calls), lambda pending: [pending], wait_ms=200, max_size=2)

    async def main():
        return await asyncio.gather(*(batcher.submit(request(f"a{i}")) for i in range(5)))

    assert [o.text for o in asyncio.run(main())] == [f"A{i}" for i in range(5)]
    assert [len(c) for c in calls] == [2, 2, 1]


def test_a_failing_call_fails_its_own_games_and_the_batcher_serves_on():
    calls: list[list[str]] = []
    batcher = RequestBatcher(echo(calls), by_letter, wait_ms=200, max_size=64)

    async def main():
        first = await asyncio.gather(*(batcher.submit(request(p)) for p in ["boom", "bad", "ok"]), return_exceptions=True)
        later = await batcher.submit(request("bye"))
        return first, later

    first, later = asyncio.run(main())
    assert isinstance(first[0], RuntimeError) and isinstance(first[1], RuntimeError)
    assert first[2].text == "OK" and later.text == "BYE"


def test_a_new_event_loop_gets_a_new_queue():
    """A backend outlives an event loop (each evaluation may run its own): the next loop's
    requests are served, not queued on the closed one."""
    calls: list[list[str]] = []
    batcher = RequestBatcher(echo(calls), by_letter, wait_ms=1, max_size=8)
    assert asyncio.run(batcher.submit(request("x"))).text == "X"
    assert asyncio.run(batcher.submit(request("y"))).text == "Y"


def test_a_cancelled_game_is_not_served():
    calls: list[list[str]] = []
    batcher = RequestBatcher(echo(calls), by_letter, wait_ms=100, max_size=8)

    async def main():
        gone = asyncio.ensure_future(batcher.submit(request("gone")))
        kept = asyncio.ensure_future(batcher.submit(request("kept")))
        await asyncio.sleep(0)  # both queued
        gone.cancel()
        return await kept

    assert asyncio.run(main()).text == "KEPT"
    assert calls == [["kept"]]


@pytest.mark.parametrize("wait_ms", [0, 20])
def test_a_lone_request_is_served_alone(wait_ms):
    calls: list[list[str]] = []
    batcher = RequestBatcher(echo(calls), by_letter, wait_ms=wait_ms, max_size=8)
    assert asyncio.run(batcher.submit(request("solo"))).text == "SOLO"
    assert calls == [["solo"]]
