"""The global ``random`` module during env calls: every game draws from a generator of its own.

TextArena's games draw from the module-level functions of ``random`` (KuhnPoker shuffles its deck
at every round), which every game in flight shares. For a game's draws to depend only on its seed
and its moves (not on which other games ran between its moves, nor on the executor), each game
has a ``GameRandom``: while one of its env calls runs (``game.enter()`` ... ``game.leave()``), the
module's functions draw from the game's own ``random.Random``. That generator is made at its first
use: by the game's first ``random.seed(x)`` (TextArena's ``reset`` makes one with the game's
seed), or seeded with the game's seed if the game draws first. A game's numbers are thus the ones
TextArena gives that seed in a game played alone, and env calls never move the module's own
generator (other code's numbers do not depend on the games played).

While at least one game is open (``open_game`` ... ``close_game``) the module's functions are
stand-ins: in the thread of a running env call they draw from that game's generator; anywhere
else they are the module's own functions (the same numbers). With no game open the module is as
it was. An env call costs two thread-local writes, where seeding the module's generator before
every reset and step would cost far more and give a step the numbers of
``random.seed(game seed, move)`` instead of the game's own stream (docs/performance.md).

Draws through ``random.shuffle`` and the like are covered; a function taken out of the module
before the first game opened (``from random import shuffle`` at import time) is not.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

_MODULE = vars(random)
_GENERATOR = random.seed.__self__  # type: ignore[attr-defined]  # the hidden Random instance behind the module's functions
#: the module's functions: bound methods of that instance (seed, random, shuffle, choice, ...)
_REAL = {
    name: fn for name, fn in _MODULE.items() if callable(fn) and getattr(fn, "__self__", None) is _GENERATOR
}  # Python-level methods and C ones (random, getrandbits) alike


class _Running(threading.local):
    game: GameRandom | None = None  # the game whose env call runs in this thread


_running = _Running()
_open = [0]  # games open; the stand-ins are in the module while it is above 0
_lock = threading.Lock()


class GameRandom:
    """One game's generator, and the calls that make the module draw from it."""

    __slots__ = ("seed", "rng")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng: random.Random | None = None

    def generator(self) -> random.Random:
        rng = self.rng
        if rng is None:
            rng = self.rng = random.Random(self.seed)
        return rng

    def enter(self) -> None:
        """An env call of this game starts in this thread: the module draws from its generator."""
        _running.game = self

    @staticmethod
    def leave() -> None:
        _running.game = None


def open_game() -> None:
    """A game starts: the module's functions are the stand-ins until the last game closes."""
    with _lock:
        _open[0] += 1
        if _open[0] == 1:
            _MODULE.update(_STAND_INS)


def close_game() -> None:
    with _lock:
        _open[0] -= 1
        if _open[0] == 0:
            _MODULE.update(_REAL)


def _stand_in(name: str) -> Callable[..., Any]:
    real = _REAL[name]
    if name == "seed":

        def seed(*args: Any, **kwargs: Any) -> None:
            game = _running.game
            if game is None:
                return real(*args, **kwargs)
            if game.rng is None and len(args) == 1 and not kwargs:
                game.rng = random.Random(args[0])  # seeded once, as seeding the module would
            else:
                game.generator().seed(*args, **kwargs)
            return None

        seed.__name__ = seed.__qualname__ = name
        return seed

    def draw(*args: Any, **kwargs: Any) -> Any:
        game = _running.game
        if game is None:
            return real(*args, **kwargs)
        return getattr(game.generator(), name)(*args, **kwargs)

    draw.__name__ = draw.__qualname__ = name
    return draw


_STAND_INS = {name: _stand_in(name) for name in _REAL}
