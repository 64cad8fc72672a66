"""Seeds: every random stream of a run is keyed by values derived here from the run's seed, so
that a run is reproducible across processes and Python versions."""

from __future__ import annotations

import hashlib
from typing import Any


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed determined by the parts (stable across processes and Python versions)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def turn_seed(game_seed: int, turn: int) -> int:
    """Sampling seed of one turn: distinct per turn, determined by the game seed (cheap: it runs
    for every turn)."""
    return (game_seed * 1_000_003 + turn * 7_919 + 1) & 0x7FFFFFFF


_M64 = 0xFFFFFFFFFFFFFFFF


def _mix64(key: int, n: int) -> int:
    """64 well-mixed bits from (key, n): the splitmix64 finalizer, a few integer operations."""
    z = (key * 0x9E3779B97F4A7C15 + n * 0xBF58476D1CE4E5B9 + 1) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def index_seed(key: int, n: int) -> int:
    """The 31-bit seed of item `n` (a game index) of a stream keyed by ``derive_seed(...)``:
    as reproducible as ``derive_seed(seed, n)`` and ten times cheaper, for per-game use."""
    return _mix64(key, n) >> 33


def unit_hash(key: int, n: int) -> float:
    """A number in [0, 1) determined by (key, n), spread like a uniform draw (e.g. whether to keep
    game n's transcript)."""
    return (_mix64(key, n) >> 11) / 9007199254740992.0
