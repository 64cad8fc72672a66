"""Tabular policies of a game's information states, and their exploitability by OpenSpiel's own
code (``exploitability.nash_conv``: never re-implemented here).

A policy is extracted exactly: each information state is rendered as the observation a player
sees, and a ``probabilities(observation, labels)`` function gives the probability of each legal
action's label (for a language model: of its canonical completion under the sampling settings it
plays with). The mass left over is ``invalid_mass`` (answers that map to no legal action); the
policy is renormalised over the legal actions for the figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from . import games, render

#: observation, {label: action id} -> {label: probability} (may sum to less than 1)
Probabilities = Callable[[str, dict[str, int]], dict[str, float]]
MAX_INFO_STATES = 100_000


@dataclass
class InfoState:
    key: str  # OpenSpiel's information state string
    player: int
    state: Any  # one state of the information state
    labels: dict[str, int]
    observation: str


def info_states(env_id: str, params: dict[str, Any] | None = None, limit: int = MAX_INFO_STATES) -> list[InfoState]:
    """Every information state of the game where a player acts, in a fixed order; ValueError
    when there are more than ``limit`` (the game is too large to extract)."""
    game = games.load(env_id, params)
    name = games.game_name(env_id)
    found: dict[str, InfoState] = {}
    for state in _decision_states(game.new_initial_state()):
        player = state.current_player()
        key = state.information_state_string(player)
        if key not in found:
            if len(found) >= limit:
                raise ValueError(f"{name} has more than max_info_states = {limit} information states: too large to extract "
                                 "exactly (raise max_info_states if it fits in memory and time)")
            labels = render.action_labels(name, state)
            found[key] = InfoState(key, player, state.clone(), labels, render.observation(name, state, player, labels))
    return list(found.values())


def _decision_states(state: Any) -> Iterator[Any]:
    if state.is_terminal():
        return
    if state.is_chance_node():
        for action, _ in state.chance_outcomes():
            yield from _decision_states(state.child(action))
        return
    yield state
    for action in state.legal_actions():
        yield from _decision_states(state.child(action))


@dataclass
class Extracted:
    policy: Any  # open_spiel.python.policy.TabularPolicy
    invalid_mass: dict[str, float]  # by information state
    seconds: float
    labels: dict[str, dict[str, int]] = field(default_factory=dict)  # by information state: label -> action id

    def table(self) -> dict[str, dict[str, float]]:
        """The policy by information state (in sorted order), as label -> probability (renormalised
        over the legal actions)."""
        return {key: {label: float(self.policy.policy_for_key(key)[action]) for label, action in self.labels[key].items()}
                for key in sorted(self.labels)}

    @property
    def max_invalid_mass(self) -> float:
        return max(self.invalid_mass.values(), default=0.0)

    @property
    def mean_invalid_mass(self) -> float:
        return sum(self.invalid_mass.values()) / max(len(self.invalid_mass), 1)


def extract(env_id: str, params: dict[str, Any] | None, probabilities: Probabilities,
            limit: int = MAX_INFO_STATES) -> Extracted:
    """The tabular policy ``probabilities`` defines on every information state of the game."""
    from open_spiel.python import policy as policy_lib

    began = time.perf_counter()
    states = info_states(env_id, params, limit)
    game = games.load(env_id, params)
    table = policy_lib.TabularPolicy(game, states={s.key: s.state for s in states})
    invalid: dict[str, float] = {}
    for info in states:
        raw = probabilities(info.observation, info.labels)
        total = sum(raw.get(label, 0.0) for label in info.labels)
        invalid[info.key] = max(0.0, 1.0 - total)
        row = table.policy_for_key(info.key)
        row[:] = 0.0
        for label, action in info.labels.items():
            row[action] = raw.get(label, 0.0) / total if total > 0 else 1.0 / len(info.labels)
    return Extracted(table, invalid, time.perf_counter() - began, {info.key: dict(info.labels) for info in states})


def nash_conv(env_id: str, params: dict[str, Any] | None, policy: Any) -> tuple[float, float]:
    """(exploitability, NashConv) of a policy, by OpenSpiel."""
    from open_spiel.python.algorithms import exploitability

    game = games.load(env_id, params)
    conv = float(exploitability.nash_conv(game, policy))
    return conv / game.num_players(), conv


def metrics(env_id: str, params: dict[str, Any] | None, probabilities: Probabilities,
            limit: int = MAX_INFO_STATES) -> dict[str, float]:
    """Exploitability, NashConv and invalid mass of the policy ``probabilities`` defines."""
    return figures(env_id, params, extract(env_id, params, probabilities, limit))


def figures(env_id: str, params: dict[str, Any] | None, extracted: Extracted) -> dict[str, float]:
    """Exploitability, NashConv and invalid mass of an extracted policy."""
    value, conv = nash_conv(env_id, params, extracted.policy)
    return {"exploitability": value, "nash_conv": conv, "invalid_mass": extracted.max_invalid_mass,
            "invalid_mass_mean": extracted.mean_invalid_mass, "info_states": float(len(extracted.invalid_mass)),
            "seconds": round(extracted.seconds, 3)}


def mixture_metrics(env_id: str, params: dict[str, Any] | None, members: list[tuple[float, Probabilities]],
                    limit: int = MAX_INFO_STATES) -> dict[str, float]:
    """Exploitability and NashConv of the mixture that draws one member per game with its
    weight, the largest invalid mass of any member, and how many members it has."""
    began = time.perf_counter()
    extracted = [extract(env_id, params, probabilities, limit) for _, probabilities in members]
    return mixture_figures(env_id, params, extracted, [w for w, _ in members], began)


def mixture_figures(env_id: str, params: dict[str, Any] | None, extracted: list[Extracted], weights: list[float],
                    began: float) -> dict[str, float]:
    """mixture_metrics' figures for policies already extracted (``began``: when the work began)."""
    policy = mixture_policy(env_id, params, [e.policy for e in extracted], weights)
    value, conv = nash_conv(env_id, params, policy)
    return {"exploitability": value, "nash_conv": conv, "invalid_mass": max(e.max_invalid_mass for e in extracted),
            "members": float(len(extracted)), "seconds": round(time.perf_counter() - began, 3)}


def expected_payoffs(env_id: str, params: dict[str, Any] | None, row: Probabilities, columns: list[Probabilities],
                     limit: int = MAX_INFO_STATES, allowance: int = 0) -> list[float]:
    """``row``'s expected return against each of ``columns`` as the env plays the games (exact,
    over every chance outcome), the mean of its two seats. An answer that names no legal action
    (the invalid mass) is an invalid move: with no allowance left the mover loses, -1 to it and +1
    to the other, and the game ends; within ``allowance`` invalid moves the mover answers again,
    taken to answer as at its first try (the env adds a note to the observation that the
    extraction does not see). With no invalid mass: OpenSpiel's ``policy_value`` of the tables."""
    root = games.load(env_id, params).new_initial_state()
    mine = extract(env_id, params, row, limit)
    out = []
    for column in columns:
        theirs = extract(env_id, params, column, limit)
        first, second = played_value(root, [mine, theirs], allowance), played_value(root, [theirs, mine], allowance)
        out.append((first[0] + second[1]) / 2)
    return out


def played_value(state: Any, seats: list[Extracted], allowance: int = 0, errors: tuple[int, int] = (0, 0)) -> list[float]:
    """Each player's expected return from ``state`` with player i played by ``seats[i]``, invalid
    answers included (``expected_payoffs``); ``errors``: the invalid moves each player has made."""
    if state.is_terminal():
        return [float(r) for r in state.returns()]
    if state.is_chance_node():
        return _weighted([(p, played_value(state.child(a), seats, allowance, errors)) for a, p in state.chance_outcomes()])
    player = state.current_player()
    seat = seats[player]
    invalid = seat.invalid_mass[state.information_state_string(player)]
    branches = [((1.0 - invalid) * p, played_value(state.child(a), seats, allowance, errors))
                for a, p in seat.policy.action_probabilities(state).items() if p > 0]
    if invalid > 0:
        if errors[player] < allowance:
            again = (errors[0] + (player == 0), errors[1] + (player == 1))
            branches.append((invalid, played_value(state, seats, allowance, again)))
        else:
            branches.append((invalid, games.forfeit_returns(player, len(errors))))
    return _weighted(branches)


def _weighted(branches: list[tuple[float, list[float]]]) -> list[float]:
    return [sum(p * values[i] for p, values in branches) for i in range(len(branches[0][1]))]


def mixture_policy(env_id: str, params: dict[str, Any] | None, tables: list[Any], weights: list[float]) -> Any:
    """The behaviour policy of a mixture of policies drawn once per game with ``weights``: at each
    information state the policies' probabilities weighted by weight x the reach of the state
    (OpenSpiel's ``PolicyAggregator``), what a player that picked one of them per game plays."""
    from open_spiel.python.algorithms.policy_aggregator import PolicyAggregator

    game = games.load(env_id, params)
    players = list(range(game.num_players()))
    return PolicyAggregator(game).aggregate(players, [tables for _ in players], [weights for _ in players])


def cfr_policy(env_id: str, params: dict[str, Any] | None, iterations: int) -> Any:
    """OpenSpiel's CFR average policy after ``iterations`` iterations."""
    from open_spiel.python.algorithms import cfr

    solver = cfr.CFRSolver(games.load(env_id, params))
    for _ in range(iterations):
        solver.evaluate_and_update_policy()
    return solver.average_policy()


def best_response_policy(env_id: str, params: dict[str, Any] | None, policy: Any) -> tuple[Any, list[float]]:
    """Each player's best response to ``policy`` (the other player's strategy), tabulated as one
    policy, and the value each player's best response gets against it."""
    from open_spiel.python.algorithms import best_response

    game = games.load(env_id, params)
    responses = [best_response.BestResponsePolicy(game, player, policy) for player in range(game.num_players())]
    table = tabulate(env_id, params, lambda info: responses[info.player].action_probabilities(info.state, info.player))
    return table, [float(r.value(game.new_initial_state())) for r in responses]


def tabulate(env_id: str, params: dict[str, Any] | None, probs: Callable[[InfoState], dict[int, float]],
             limit: int = MAX_INFO_STATES) -> Any:
    """A TabularPolicy from action probabilities per information state."""
    from open_spiel.python import policy as policy_lib

    states = info_states(env_id, params, limit)
    table = policy_lib.TabularPolicy(games.load(env_id, params), states={s.key: s.state for s in states})
    for info in states:
        row = table.policy_for_key(info.key)
        row[:] = 0.0
        for action, p in probs(info).items():
            row[action] = p
    return table
