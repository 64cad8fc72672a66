"""What a player sees, as text for a language model: the rules, its information state (never the
opponent's private cards) and its legal actions as bracketed labels, in the line the templates
and scripted agents read (``Your available actions are: '[pass]', '[bet]'``).

An observation is a function of the player's information state (perfect-information games: of
the board), so a policy over observations is a policy over information states.
"""

from __future__ import annotations

import re
from typing import Any

RULES = {
    "kuhn_poker": "Kuhn poker. A deck of three cards, J < Q < K; each player antes 1 chip and is dealt one card. "
    "Players act in turn: [pass] or [bet] 1 chip; facing a bet, [bet] calls and [pass] folds. "
    "At showdown the higher card takes the pot.",
    "leduc_poker": "Leduc poker. Six cards, two each of J, Q, K; each player antes 1 chip and is dealt one private card; "
    "a public card is dealt after the first betting round. Two betting rounds (raises of 2, then 4; at most two a "
    "round). A private card that pairs the public card wins, else the higher private card.",
    "liars_dice": "Liar's dice. Each player rolls dice in secret. In turn, bid a quantity and a face ([2-5]: at least "
    "two 5s among all dice; 6s are wild), each bid higher than the last, or call the last bid a lie ([liar]). "
    "Whoever is wrong about the challenged bid loses.",
    "tic_tac_toe": "Tic-tac-toe. Take turns marking an empty cell, numbered 0-8 row by row from the top left; "
    "three of your marks in a row, column or diagonal wins.",
    "goofspiel": "Goofspiel. Each player holds the cards 1..N. Each turn a point card is shown and both players bid one "
    "of their cards in secret; the higher bid wins the point card's value. The most points wins.",
}
KUHN_CARDS = "JQK"


def action_labels(game_name: str, state: Any) -> dict[str, int]:
    """Bracketed label -> action id for the state's legal actions (each label unique)."""
    labels: dict[str, int] = {}
    player = state.current_player()
    for action in state.legal_actions():
        if game_name == "tic_tac_toe":
            label = f"[{action}]"
        else:
            text = re.sub(r"^\[P\d+\]", "", state.action_to_string(player, action))
            text = re.sub(r"[^a-z0-9\- ]", "", text.lower().replace(":", " ")).strip()
            label = "[" + re.sub(r"\s+", " ", text) + "]"
        if label in labels or label == "[]":
            label = f"[action {action}]"
        labels[label] = action
    return labels


def information(game_name: str, state: Any, player: int) -> str:
    """The player's information state in words."""
    if game_name == "kuhn_poker":
        info = state.information_state_string(player)
        moves = [f"player {i % 2} {'bet' if c == 'b' else 'passed'}" for i, c in enumerate(info[1:])]
        return f"Betting so far: {', '.join(moves) if moves else 'none'}. Your card: {KUHN_CARDS[int(info[0])]}."
    if game_name == "liars_dice":
        tokens = state.information_state_string(player).split()
        dice = [t for t in tokens if t.isdigit()]
        bids = [t.lower() for t in tokens if not t.isdigit()]
        return f"Your dice: {' '.join(dice)}. Bids so far: {', '.join(bids) if bids else 'none'}."
    game = state.get_game()
    if game.get_type().information == game.get_type().Information.PERFECT_INFORMATION and \
            game.get_type().provides_observation_string:
        return state.observation_string(player).strip()
    return state.information_state_string(player).strip().replace("][", "] [")


def observation(game_name: str, state: Any, player: int, labels: dict[str, int]) -> str:
    rules = RULES.get(game_name, f"{state.get_game().get_type().long_name} (OpenSpiel {game_name}).")
    actions = ", ".join(f"'{label}'" for label in labels)
    # the information state last, right before the answer: what the decision turns on
    return f"{rules}\nYou are player {player}.\nYour available actions are: {actions}\n{information(game_name, state, player)}"
