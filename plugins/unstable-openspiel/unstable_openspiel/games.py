"""Loading OpenSpiel games for text play: two players, turns (a simultaneous-move game such as
goofspiel is played turn by turn, OpenSpiel's own conversion), parameters from env kwargs, and
one line naming what is wrong otherwise."""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import sys
from collections.abc import Iterator
from typing import Any

PREFIX = "openspiel/"
#: games checked to play, render and solve here (tests play each one)
KNOWN_GAMES = ["kuhn_poker", "leduc_poker", "liars_dice", "tic_tac_toe", "goofspiel"]


def game_name(env_id: str) -> str:
    """'openspiel/kuhn_poker' or 'kuhn_poker' -> 'kuhn_poker'."""
    return env_id.removeprefix(PREFIX)


def load(env_id: str, params: dict[str, Any] | None = None) -> Any:
    """The pyspiel game of an env id with its parameters; ValueError (one line) when it cannot be
    played here: unknown, not two players, not turn-based after conversion, bad parameters."""
    return _load(game_name(env_id), tuple(sorted((params or {}).items())))


@functools.lru_cache(maxsize=64)
def _load(name: str, params: tuple[tuple[str, Any], ...]) -> Any:
    import pyspiel

    registered = [g.short_name for g in pyspiel.registered_games()]
    if name not in registered:
        close = difflib.get_close_matches(name, registered, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown OpenSpiel game {name!r}.{hint} Checked here: {', '.join(KNOWN_GAMES)}")
    for key, value in params:
        if not isinstance(value, (bool, int, float, str)):
            raise ValueError(f"OpenSpiel game {name!r}: parameter {key} = {value!r} must be a number, a bool or a string")
    try:
        with c_stderr_silenced():  # OpenSpiel prints its errors to stderr before raising them
            game = pyspiel.load_game(name, dict(params))
    except pyspiel.SpielError as exc:
        message = str(exc).split("OpenSpiel exception:")[0].strip() or str(exc)
        raise ValueError(f"OpenSpiel game {name!r} with parameters {dict(params)}: {message}") from None
    kind = game.get_type()
    if game.num_players() != 2:
        raise ValueError(f"OpenSpiel game {name!r} has {game.num_players()} players; only two-player games are supported")
    if kind.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        game = pyspiel.convert_to_turn_based(game)
    elif kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        raise ValueError(f"OpenSpiel game {name!r} is neither sequential nor simultaneous ({kind.dynamics})")
    if not kind.provides_information_state_string:
        raise ValueError(f"OpenSpiel game {name!r} has no information state strings: its policies cannot be extracted")
    return game


@contextlib.contextmanager
def c_stderr_silenced() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null for the block (what C++ code writes there too)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def sample_chance(state: Any, rng: Any) -> None:
    """Resolve chance nodes with draws from ``rng`` (the game's seed decides the deal)."""
    while state.is_chance_node():
        actions, probabilities = zip(*state.chance_outcomes(), strict=True)
        state.apply_action(rng.choices(actions, weights=probabilities)[0])


def forfeit_returns(loser: int, num_players: int = 2) -> list[float]:
    """The returns of a game lost by an invalid move: -1 to the player who made it, +1 to the
    other (TextArena's rule for two-player games; the env's and the exact payoffs' alike)."""
    return [-1.0 if i == loser else 1.0 for i in range(num_players)]
