"""env `openspiel`: OpenSpiel games behind the ``GameEnv`` protocol.

Chance events (deals, dice) are drawn from a generator seeded with the game's seed. An action is
one of the bracketed labels the observation lists (case and spacing forgiven); anything else is
an invalid move, handled as TextArena's two-player games do: with no allowance left the mover
loses (-1, the opponent +1) and the game ends; within the allowance the mover is told and asked
again. Final rewards are OpenSpiel's returns (chips in the poker games).
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unstable_core import ActionProbabilities, EnvSpec

from . import games, policies, render

INVALID_NOTE = "Your last answer was not one of the available actions; choose one of them."


class OpenSpielOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invalid_move_allowance: int = Field(0, ge=0, description="Invalid moves a player may make before losing (TextArena's rule).")
    max_info_states: int = Field(
        policies.MAX_INFO_STATES, ge=1, description="Largest game (information states) whose policy metrics are computed."
    )


class OpenSpielGame:
    def __init__(self, env: EnvSpec, allowance: int) -> None:
        self.name = games.game_name(env.env_id)
        self.game = games.load(env.env_id, env.kwargs)
        self.allowance = allowance
        self.state: Any = None
        self.labels: dict[str, int] = {}
        self.errors = [0, 0]
        self.note = ""
        self.forfeit: int | None = None

    def reset(self, num_players: int, seed: int) -> None:
        if num_players != 2:
            raise ValueError(f"OpenSpiel game {self.name!r} is played by 2 players, not {num_players}")
        self.rng = random.Random(seed)
        self.state = self.game.new_initial_state()
        games.sample_chance(self.state, self.rng)
        self.errors, self.note, self.forfeit = [0, 0], "", None

    def observe(self) -> tuple[int, str]:
        player = self.state.current_player()
        self.labels = render.action_labels(self.name, self.state)
        text = render.observation(self.name, self.state, player, self.labels)
        return player, (f"{self.note}\n{text}" if self.note else text)

    def legal_actions(self) -> list[str]:
        """The labels of the actions open to the player ``observe`` named (``collection.answers = "choice"``)."""
        return list(self.labels)

    def step(self, action: str) -> tuple[bool, bool]:
        player = self.state.current_player()
        chosen = self.labels.get(normalise(action))
        if chosen is None:
            if self.errors[player] < self.allowance:
                self.errors[player] += 1
                self.note = INVALID_NOTE
                return False, True
            self.forfeit = player
            return True, True
        self.note = ""
        self.state.apply_action(chosen)
        games.sample_chance(self.state, self.rng)
        return bool(self.state.is_terminal()), False

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
        if self.forfeit is not None:
            rewards = dict(enumerate(games.forfeit_returns(self.forfeit)))
        elif self.state is not None and self.state.is_terminal():
            rewards = {i: float(r) for i, r in enumerate(self.state.returns())}
        else:
            rewards = {0: 0.0, 1: 0.0}
        info = {i: {"invalid_move": self.forfeit == i, "invalid_moves": self.errors[i]} for i in range(2)}
        return rewards, info


def normalise(action: str) -> str:
    """'[ Bet ]' -> '[bet]'; a bare 'bet' -> '[bet]'."""
    text = " ".join(action.strip().lower().split())
    if not text.startswith("["):
        text = f"[{text}]"
    return text.replace("[ ", "[").replace(" ]", "]")


class OpenSpielProvider:
    def __init__(self, options: OpenSpielOptions) -> None:
        self.options = options

    def make(self, env: EnvSpec) -> OpenSpielGame:
        return OpenSpielGame(env, self.options.invalid_move_allowance)

    def known_env_ids(self) -> list[str]:
        return [games.PREFIX + name for name in games.KNOWN_GAMES]

    def policy_metrics(self, env: EnvSpec, probabilities: ActionProbabilities) -> dict[str, float]:
        """Exploitability, NashConv and invalid mass (the largest and the mean over information
        states) of the policy, by OpenSpiel."""
        return policies.metrics(env.env_id, env.kwargs, by_label(probabilities), self.options.max_info_states)

    def mixture_metrics(self, env: EnvSpec, members: list[tuple[float, ActionProbabilities]]) -> dict[str, float]:
        """The same for the mixture that plays one member per game (``collection.eval_mixtures``)."""
        return policies.mixture_metrics(env.env_id, env.kwargs, [(w, by_label(p)) for w, p in members],
                                        self.options.max_info_states)

    def expected_payoffs(self, env: EnvSpec, row: ActionProbabilities, columns: list[ActionProbabilities]) -> list[float]:
        """``row``'s exact expected return against each of ``columns`` as this env plays them
        (invalid answers forfeit), the mean of its two seats (psro's ``payoff = "exact"``)."""
        return policies.expected_payoffs(env.env_id, env.kwargs, by_label(row), [by_label(c) for c in columns],
                                         self.options.max_info_states, self.options.invalid_move_allowance)

    def least_exploitable_mixture(self, env: EnvSpec, members: list[ActionProbabilities]) -> list[float]:
        """The weights of the least exploitable mixture of the members, one drawn per game (a
        sequence-form linear program, ``least_exploitable``; psro's ``meta_solver = "least"``)."""
        from .least_exploitable import least_exploitable

        tables = [policies.extract(env.env_id, env.kwargs, by_label(m), self.options.max_info_states).policy for m in members]
        return least_exploitable(env.env_id, env.kwargs, tables, self.options.max_info_states)[0]


def by_label(probabilities: ActionProbabilities) -> policies.Probabilities:
    """The core's (observation, labels) -> probabilities as the extraction asks: {label: probability}."""
    def probabilities_by_label(observation: str, labels: dict[str, int]) -> dict[str, float]:
        names = list(labels)
        return dict(zip(names, probabilities(observation, names), strict=True))

    return probabilities_by_label


def check_env(env: EnvSpec, options: OpenSpielOptions) -> None:
    """Load the game with its parameters and check the seats: one line naming what is wrong."""
    games.load(env.env_id, env.kwargs)
    if env.num_players != 2:
        raise ValueError(f"OpenSpiel game {games.game_name(env.env_id)!r} is played by 2 players, not num_players = {env.num_players}")
    game = OpenSpielProvider(options).make(env)  # made, reset and one move played as a run does
    try:
        game.reset(env.num_players, seed=0)
        game.observe()
        game.step(next(iter(game.labels), ""))
        game.close()
    except Exception as exc:
        with_kwargs = f" with parameters {env.kwargs}" if env.kwargs else ""
        raise ValueError(f"OpenSpiel game {games.game_name(env.env_id)!r}{with_kwargs} fails on its first move: "
                         f"{type(exc).__name__}: {exc}") from None
