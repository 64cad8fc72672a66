"""env `textarena`: TextArena games through its own API (make, reset, get_observation, step, close)."""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import hookimpl
from ..components import EnvProviderSpec
from ..errors import describe_error
from ..types import EnvSpec
from . import global_random

#: Ids checked to work offline on Python 3.11 here (tests make and play each one).
KNOWN_ENV_IDS = [
    "TicTacToe-v0",
    "TicTacToe-v0-train",
    "KuhnPoker-v0",
    "KuhnPoker-v0-train",
    "KuhnPoker-v0-short",
    "SimpleTak-v0",
    "SimpleTak-v0-train",
    "ConnectFour-v0",
    "ConnectFour-v0-train",
    "SimpleNegotiation-v0",
    "SimpleNegotiation-v0-train",
]


class TextArenaOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invalid_move_allowance: int = Field(
        0, ge=0, description="Invalid moves a player may make before losing (UnstableBaselines: 0)."
    )


class TextArenaGame:
    """One TextArena environment behind the ``GameEnv`` protocol."""

    def __init__(self, env: Any, invalid_move_allowance: int) -> None:
        self.env = env
        self.allowance = invalid_move_allowance
        self._player = 0
        self.state: Any = None
        self._game_info: dict[int, Any] = {}
        self._counts_errors = False
        self._flagged: set[int] = set()
        # TextArena's games draw from the global ``random`` module: during this game's env calls
        # it draws from the game's own generator (global_random), so the game's numbers depend
        # only on its seed and its moves, not on the games played between them
        self._random: global_random.GameRandom | None = None

    def reset(self, num_players: int, seed: int) -> None:
        if self._random is None:
            global_random.open_game()
        self._random = game_random = global_random.GameRandom(seed)
        game_random.enter()
        try:
            self.env.reset(num_players=num_players, seed=seed)
        finally:
            game_random.leave()
        # the state object is made by reset; cache it (each lookup walks the wrapper chain)
        self.state = state = getattr(self.env, "state", None)
        if state is not None and hasattr(state, "error_allowance"):
            state.error_allowance = self.allowance
        self._game_info = getattr(state, "game_info", None) or {}
        self._counts_errors = hasattr(state, "error_count")
        self._flagged = set()

    def observe(self) -> tuple[int, str]:
        pid, obs = self.env.get_observation()
        self._player = int(pid)
        if not isinstance(obs, str):  # raw message lists (unwrapped envs)
            obs = "\n".join(m[1] if isinstance(m, (tuple, list)) and len(m) > 1 else str(m) for m in obs)
        return self._player, obs

    def step(self, action: str) -> tuple[bool, bool]:
        # an invalid move either uses up allowance (error_count grows) or ends the player's game
        # (TextArena sets game_info[player]["invalid_move"], once)
        state, pid = self.state, self._player
        errors_before = state.error_count if self._counts_errors else 0
        game_random: global_random.GameRandom = self._random  # type: ignore[assignment]  # reset() made it
        game_random.enter()
        try:
            done, _info = self.env.step(action=action)
        finally:
            game_random.leave()
        if self._counts_errors and state.error_count > errors_before:
            return bool(done), True
        info = self._game_info.get(pid)
        if info and info.get("invalid_move", False) and pid not in self._flagged:
            self._flagged.add(pid)
            return bool(done), True
        return bool(done), False

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
        if self._random is not None:
            self._random = None
            global_random.close_game()
        out = self.env.close()
        rewards, info = out if isinstance(out, tuple) else (out, {})
        rewards = {int(k): float(v) for k, v in (rewards or {}).items()}
        info = {int(k): dict(v) for k, v in (info or {}).items()}
        return rewards, info


class TextArenaProvider:
    def __init__(self, options: TextArenaOptions) -> None:
        self.options = options
        self._make: Any = None

    def make(self, env: EnvSpec) -> TextArenaGame:
        if self._make is None:
            import textarena as ta  # heavy: imported when the first game is made

            self._make = ta.make
        return TextArenaGame(self._make(env.env_id, **env.kwargs), self.options.invalid_move_allowance)

    def known_env_ids(self) -> list[str]:
        return list(KNOWN_ENV_IDS)


def check_env(env: EnvSpec, options: TextArenaOptions) -> None:
    """Make the environment as a run does, reset it and play one move (the last bracketed action
    its first observation shows): a misspelt id, a player count the game does not take or a
    keyword argument that breaks it is found before a run, not as thousands of failed games."""
    from textarena.envs.registration import ENV_REGISTRY

    if env.env_id not in ENV_REGISTRY:
        close = difflib.get_close_matches(env.env_id, list(ENV_REGISTRY), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown TextArena env {env.env_id!r}.{hint} Known to work offline here: {', '.join(KNOWN_ENV_IDS)}")
    try:
        game = TextArenaProvider(options).make(env)
    except TypeError as exc:
        raise ValueError(f"env {env.env_id!r} does not take kwargs {env.kwargs}: {exc}") from None
    with_kwargs = f" with kwargs {env.kwargs}" if env.kwargs else ""
    try:
        try:
            game.reset(num_players=env.num_players, seed=0)
        except Exception as exc:
            raise ValueError(f"env {env.env_id!r}{with_kwargs} cannot be played with num_players = {env.num_players}: "
                             f"{describe_error(exc)}") from None
        try:
            _, text = game.observe()
            moves = re.findall(r"\[[^\[\]\n]{1,40}\]", text)
            game.step(moves[-1] if moves else "")
        except Exception as exc:
            raise ValueError(f"env {env.env_id!r}{with_kwargs} fails on its first move: {describe_error(exc)}") from None
    finally:
        try:
            game.close()
        except Exception:
            pass


@hookimpl
def unstable_envs() -> list[EnvProviderSpec]:
    return [
        EnvProviderSpec(
            name="textarena",
            summary="TextArena games by id (make, reset, observe, step, close)",
            config=TextArenaOptions,
            factory=lambda options, ctx: TextArenaProvider(options),
            check_env=check_env,
        )
    ]
