"""Sync mode's turn rounds: no game is released before every live game waits, games are released
in key order whatever order they arrived in, and a game that ends releases the others."""

import asyncio

from unstable_core.runtime.game.lockstep import Lockstep


def test_a_round_waits_for_every_game_and_releases_in_key_order():
    async def scenario():
        lock, order = Lockstep(), []
        late = asyncio.Event()
        lock.expect(3)

        async def game(key, wait_first=None):
            if wait_first is not None:
                await wait_first.wait()
            await lock.turn(key)
            order.append(key)

        tasks = [asyncio.ensure_future(game((2, 0))), asyncio.ensure_future(game((0, 0), late)), asyncio.ensure_future(game((1, 0)))]
        for _ in range(5):
            await asyncio.sleep(0)  # let every task run up to where it waits
        assert order == [] and len(lock.waiting) == 2  # game (0, 0) has not arrived: nobody goes
        late.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == [(0, 0), (1, 0), (2, 0)]


def test_a_game_that_ends_releases_the_waiting_ones():
    async def scenario():
        lock = Lockstep()
        lock.expect(2)
        waiter = asyncio.ensure_future(lock.turn((1, 0)))
        await asyncio.sleep(0)
        assert not waiter.done()
        lock.leave()  # the other game ended without wanting a completion
        await asyncio.wait_for(waiter, 1)
        assert lock.live == 1 and lock.waiting == []

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_round():
    async def scenario():
        lock = Lockstep()
        lock.expect(3)
        first = asyncio.ensure_future(lock.turn((0, 0)))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        assert lock.waiting == []
        lock.leave()  # the cancelled game's worker leaves
        second = asyncio.ensure_future(lock.turn((1, 0)))
        await asyncio.sleep(0)
        assert not second.done()  # one live game has not arrived yet
        lock.leave()
        await asyncio.wait_for(second, 1)

    asyncio.run(scenario())
