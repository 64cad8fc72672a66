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
