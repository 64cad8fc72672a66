"""Seeding the global ``random`` module for one env call, paid only when the call draws from it.

TextArena's games draw from the module-level functions of ``random`` (KuhnPoker shuffles its deck
at every round), which every game in flight shares. For a game's draws to depend only on its seed
and its moves, each reset and step starts from a seed of its own. ``random.seed`` costs about
4 µs and most steps draw nothing (TicTacToe's never, KuhnPoker's 3 in 7), so instead of seeding
before each call, ``arm(seed)`` puts stand-ins for the module's functions in its namespace (about
0.4 µs): the first one the call uses seeds the generator with ``seed``, puts the real functions
back and draws. ``disarm()`` after the call puts them back if nothing drew. The numbers a call
draws are the same as with ``random.seed(seed)`` before it.

Draws through ``random.shuffle`` and the like are covered; a function taken out of the module
before the call (``from random import shuffle`` at import time) is not. Callers hold a lock
around arm, call and disarm (the env wrapper does), as they would around a reseed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

_MODULE = vars(random)
_GENERATOR = random.seed.__self__  # the hidden Random instance behind the module's functions
#: the module's functions: bound methods of that instance (seed, random, shuffle, choice, ...)
_REAL = {
    name: fn for name, fn in _MODULE.items() if callable(fn) and getattr(fn, "__self__", None) is _GENERATOR
}  # Python-level methods and C ones (random, getrandbits) alike
_seed_real = _REAL["seed"]
_pending: list[Any] = [None]  # the seed the next draw starts from, while armed


def _stand_in(name: str) -> Callable[..., Any]:
    real = _REAL[name]

    def draw(*args: Any, **kwargs: Any) -> Any:
        seed = _pending[0]
        if seed is not None:
            _pending[0] = None
            _MODULE.update(_REAL)
            if name != "seed":  # a call that seeds the module itself overrides ours anyway
                _seed_real(seed)
        return real(*args, **kwargs)

    draw.__name__ = draw.__qualname__ = name
    return draw


_STAND_INS = {name: _stand_in(name) for name in _REAL}


def arm(seed: int) -> None:
    """The global generator starts from ``seed`` if the code that runs until ``disarm`` draws."""
    _pending[0] = seed
    _MODULE.update(_STAND_INS)


def disarm() -> None:
    """The module's own functions again (they already are if something drew)."""
    if _pending[0] is not None:
        _pending[0] = None
        _MODULE.update(_REAL)
