"""Turn rounds for sync mode, so that a batching backend's batches do not depend on timing.

A backend that batches serves together what reaches it within a few milliseconds. Which requests
those are depends on how fast each game got there: an env call on a worker thread, a busy machine.
Its numbers then differ in the last bits between runs, since a matrix product's rounding depends
on the batch around a row. In sync mode the rollout therefore plays its games in rounds: a game
that wants a completion waits until every game being played wants one (or has ended), and the
round's requests are sent in game order, all before the backend looks at its queue.
"""

from __future__ import annotations

import asyncio


class Lockstep:
    def __init__(self) -> None:
        self.live = 0  # games being played (counted from when they are queued)
        self.waiting: list[tuple[tuple[int, int], asyncio.Future[None]]] = []

    def expect(self, n: int) -> None:
        """``n`` more games will be played."""
        self.live += n

    def leave(self) -> None:
        """A game ended (or was skipped): the others no longer wait for it."""
        self.live -= 1
        self._release_if_all_wait()

    async def turn(self, key: tuple[int, int]) -> None:
        """Wait until every live game waits; games are released in ``key`` order."""
        future = asyncio.get_running_loop().create_future()
        entry = (key, future)
        self.waiting.append(entry)
        self._release_if_all_wait()
        try:
            await future
        except asyncio.CancelledError:
            if entry in self.waiting:
                self.waiting.remove(entry)
            raise

    def _release_if_all_wait(self) -> None:
        if self.waiting and len(self.waiting) >= self.live:
            released, self.waiting = sorted(self.waiting, key=lambda e: e[0]), []
            for _, future in released:  # their games resume, and send their requests, in this order
                if not future.done():
                    future.set_result(None)
