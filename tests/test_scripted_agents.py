"""Scripted agents and the textarena env provider, on real TextArena games."""

import asyncio
import random

import pytest

from unstable_core.builtin.env_textarena import KNOWN_ENV_IDS, TextArenaOptions, TextArenaProvider
from unstable_core.builtin.inference_scripted import AGENTS, GARBAGE, ScriptedInference, valid_moves
from unstable_core.builtin.templates import extract_boxed_action
from unstable_core.types import EnvSpec, GenerationRequest, ModelRef


def play(env_id, agents, seed=0, allowance=0, max_turns=400):
    game = TextArenaProvider(TextArenaOptions(invalid_move_allowance=allowance)).make(EnvSpec(env_id=env_id))
    game.reset(num_players=2, seed=seed)
    invalid, done, turns = [], False, 0
    while not done and turns < max_turns:
        pid, obs = game.observe()
        action, _ = extract_boxed_action(AGENTS[agents[pid]](obs, random.Random(seed * 1000 + turns)))
        done, bad = game.step(action)
        invalid.append(bad)
        turns += 1
    rewards, info = game.close()
    return done, rewards, invalid, info


@pytest.mark.parametrize("env_id", ["TicTacToe-v0-train", "KuhnPoker-v0-train", "SimpleTak-v0-train", "ConnectFour-v0-train", "TicTacToe-v0", "ConnectFour-v0"])
@pytest.mark.parametrize("agent", ["random-valid", "first-valid"])
def test_valid_agents_never_make_invalid_moves(env_id, agent):
    for seed in range(5):
        done, rewards, invalid, _ = play(env_id, [agent, agent], seed)
        assert done and not any(invalid), (env_id, seed)
        assert set(rewards) == {0, 1}


def test_every_known_env_plays_to_the_end():
    for env_id in KNOWN_ENV_IDS:
        done, rewards, _, _ = play(env_id, ["random-valid", "random-valid"], max_turns=60)
        assert rewards is not None


def test_invalid_move_detected_and_allowance_configurable():
    game = TextArenaProvider(TextArenaOptions()).make(EnvSpec(env_id="TicTacToe-v0-train"))
    game.reset(num_players=2, seed=0)
    game.observe()
    assert game.step("[banana]") == (True, True)
    rewards, info = game.close()
    assert rewards == {0: -1.0, 1: 1.0} and info[0]["invalid_move"]
    # with an allowance of 1 the first invalid move does not end the game
    game = TextArenaProvider(TextArenaOptions(invalid_move_allowance=1)).make(EnvSpec(env_id="TicTacToe-v0-train"))
    game.reset(num_players=2, seed=0)
    game.observe()
    assert game.step("[banana]") == (False, True)
    assert game.step("[99]") == (True, True)
    game.close()  # an open game keeps the random module's stand-ins in place (global_random)


def test_greedy_wins_and_blocks():
    obs_win = ("As Player 0, you will be 'O', while your opponent is 'X'.\nCurrent Board:\n\n"
               " O | O | 2 \n---+---+---\n X | X | 5 \n---+---+---\n 6 | 7 | 8 \n\nAvailable Moves: '[2]', '[5]', '[6]', '[7]', '[8]'")
    assert AGENTS["greedy"](obs_win, random.Random(0)) == "\\boxed{[2]}"
    obs_block = obs_win.replace(" O | O | 2 ", " O | 1 | 2 ").replace("'[2]', '[5]'", "'[1]', '[2]', '[5]'")
    assert AGENTS["greedy"](obs_block, random.Random(0)) == "\\boxed{[5]}"


def test_greedy_beats_random_on_tictactoe():
    wins = losses = 0
    for seed in range(60):
        seats = ["greedy", "random-valid"] if seed % 2 == 0 else ["random-valid", "greedy"]
        _, rewards, _, _ = play("TicTacToe-v0-train", seats, seed)
        g = seats.index("greedy")
        wins += rewards[g] > rewards[1 - g]
        losses += rewards[g] < rewards[1 - g]
    assert wins > 3 * losses


def test_valid_moves_parsers():
    assert valid_moves("Your available actions are: '[check]', '[bet]'") == ["[check]", "[bet]"]
    c4 = "Board state:\n0 1 2\n-----\nX . .\nX O .\n"
    assert valid_moves(c4) == ["[col 1]", "[col 2]"]


def test_scripted_backend_is_seeded_and_checks_names():
    backend = ScriptedInference()
    req = GenerationRequest(model=ModelRef(uid="r", model="random-valid"), prompt="", observation="Available Moves: '[1]', '[2]', '[3]'", seed=5)
    a = asyncio.run(backend.generate(req)).text
    assert all(asyncio.run(backend.generate(req)).text == a for _ in range(5))
    with pytest.raises(ValueError, match="unknown scripted agent"):
        backend.complete(req.model_copy(update={"model": ModelRef(uid="x", model="nope")}))


def test_garbage_includes_every_fault_kind():
    assert "" in GARBAGE and any(len(g) >= 100_000 for g in GARBAGE)
    assert any(any(0xDC80 <= ord(c) <= 0xDCFF for c in g) for g in GARBAGE)  # not encodable as UTF-8


def test_extraction_rules():
    assert extract_boxed_action("think \\boxed{1} then \\boxed{4}") == ("[4]", True)
    assert extract_boxed_action("\\boxed{[col 3]}") == ("[col 3]", True)
    assert extract_boxed_action("no answer") == ("no answer", False)


def round_win_probability(first: bool, policy) -> float:
    """One round of TextArena's KuhnPoker against random-valid, worked out over the 6 deals and
    the opponent's uniform choices; ``policy(card, history)`` returns the action. The pot never
    grows (a bet or call moves no chips), so a round is won by the opponent's fold or at showdown."""
    total = 0.0
    for mine, theirs in ((a, b) for a in range(3) for b in range(3) if a != b):
        showdown = float(mine > theirs)

        def after(history: tuple[str, ...], my_turn: bool) -> float:
            last = history[-1] if history else None
            if last == "fold":
                return 1.0 if my_turn else 0.0  # the one who folded just moved: the opponent if it is my turn
            if last == "call" or history[-2:] == ("check", "check"):
                return showdown
            choices = ["fold", "call"] if last == "bet" else ["check", "bet"]
            if my_turn:
                return after(history + (policy(mine, history),), False)
            return sum(after(history + (c,), True) for c in choices) / 2

        total += after((), first) / 6
    return total


def test_best_response_is_the_best_response_to_random_valid_on_kuhn_poker():
    import itertools

    best = AGENTS["best-response"]
    as_agent = {"check,bet": "[bet]", "fold,call": "[call]"}
    for options, move in as_agent.items():
        obs = "Your card is: 'J'\nYour available actions are: " + ", ".join(f"'[{o}]'" for o in options.split(","))
        assert best(obs, random.Random(0)) == "\\boxed{" + move + "}"

    def bet_call(card, history):
        return "call" if history[-1:] == ("bet",) else "bet"

    # every deterministic policy (an action per card at each of the 3 decision points) does no better
    points = [(), ("check",), ("bet",), ("check", "bet")]
    options = {(): ["check", "bet"], ("check",): ["check", "bet"], ("bet",): ["fold", "call"], ("check", "bet"): ["fold", "call"]}
    for first in (True, False):
        mine = [p for p in points if (len(p) % 2 == 0) == first]
        best_value = round_win_probability(first, bet_call)
        for choice in itertools.product(*[options[p] for p in mine for _ in range(3)]):
            table = {(p, card): choice[i * 3 + card] for i, p in enumerate(mine) for card in range(3)}
            assert round_win_probability(first, lambda card, h: table[(h, card)]) <= best_value + 1e-12
    assert round_win_probability(True, bet_call) == pytest.approx(0.75) and round_win_probability(False, bet_call) == pytest.approx(0.625)


def test_best_response_wins_kuhn_poker_as_often_as_worked_out():
    """Three rounds, the most chips wins (rounds are worth one chip each, so no draws); player 1
    opens rounds 1 and 3. Worked out: seat 1 wins 51/64 of games, seat 0 47.5/64."""
    p, q = 0.75, 0.625
    expected = {1: p * p + 2 * p * (1 - p) * q, 0: q * q + 2 * q * (1 - q) * p}
    games = 400
    for seat, probability in expected.items():
        wins = 0
        for seed in range(games):
            seats = ["random-valid", "random-valid"]
            seats[seat] = "best-response"
            _, rewards, invalid, _ = play("KuhnPoker-v0-train", seats, seed)
            assert not any(invalid)
            wins += rewards[seat] > rewards[1 - seat]
        standard_error = (probability * (1 - probability) / games) ** 0.5
        assert abs(wins / games - probability) < 4 * standard_error, (seat, wins / games, probability)


def test_scripted_agents_score_their_completions_exactly():
    """``completion_probabilities``: every path of an agent's ``rng.choice`` draws enumerated, so
    random-valid's answers are exactly uniform over the valid moves; an agent that draws any
    other way is refused rather than estimated."""
    import random

    import pytest

    from unstable_core import GenerationRequest, ModelRef, build_component
    from unstable_core.builtin.inference_scripted import answer_distribution

    obs = "Your available actions are: '[a]', '[b]', '[c]'"
    backend = build_component("inference", "scripted")

    def scored(agent, completions):
        request = GenerationRequest(model=ModelRef(uid=agent, model=agent), prompt=obs, observation=obs)
        return backend.completion_probabilities(request, completions)

    moves = ["\\boxed{[a]}", "\\boxed{[b]}", "\\boxed{[c]}", "\\boxed{[d]}"]
    assert scored("random-valid", moves) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0.0])
    assert scored("first-valid", moves) == [1.0, 0.0, 0.0, 0.0]

    def two_draws(observation, rng):  # nested choices: 1/2 x 1/3
        return rng.choice(["x", "y"]) + rng.choice(["1", "2", "3"])

    found = answer_distribution(two_draws, obs)
    assert len(found) == 6 and all(p == pytest.approx(1 / 6) for p in found.values())
    sampled = {two_draws(obs, random.Random(s)) for s in range(200)}
    assert sampled == set(found)
    with pytest.raises(ValueError, match="cannot be enumerated exactly"):
        answer_distribution(lambda observation, rng: str(rng.random()), obs)
