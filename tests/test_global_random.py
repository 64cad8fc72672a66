"""The env wrapper's games each draw from a generator of their own (global_random)."""

import random
import threading

import pytest

from unstable_core.builtin import global_random
from unstable_core.builtin.global_random import GameRandom

GENERATOR = random.seed.__self__  # the instance behind the module's functions
NAMES = [name for name in dir(random) if getattr(getattr(random, name), "__self__", None) is GENERATOR]
assert {"random", "getrandbits", "shuffle", "seed", "getstate"} <= set(NAMES)


def _draws() -> list:
    deck = list(range(10))
    random.shuffle(deck)
    return [deck, random.random(), random.randint(0, 1000), random.choice("abcdef"), random.getrandbits(40)]


def _expected(rng: random.Random) -> list:
    deck = list(range(10))
    rng.shuffle(deck)
    return [deck, rng.random(), rng.randint(0, 1000), rng.choice("abcdef"), rng.getrandbits(40)]


def _call(game: GameRandom, fn):
    game.enter()
    try:
        return fn()
    finally:
        game.leave()


@pytest.fixture
def opened():
    global_random.open_game()
    try:
        yield
    finally:
        global_random.close_game()


def test_a_game_draws_its_seeds_stream_across_its_calls(opened):
    game = GameRandom(123)
    first, second = _call(game, _draws), _call(game, _draws)
    rng = random.Random(123)  # one stream, seeded once, drawn on from call to call
    assert first == _expected(rng) and second == _expected(rng)


def test_a_game_that_seeds_the_module_draws_from_that_seed(opened):
    game = GameRandom(1)
    got = _call(game, lambda: (random.seed(42), _draws())[1])  # TextArena's reset seeds the module
    assert got == _expected(random.Random(42))


def test_games_interleaved_draw_what_each_draws_alone(opened):
    a, b = GameRandom(5), GameRandom(6)
    interleaved = [_call(a, _draws), _call(b, _draws), _call(a, _draws), _call(b, _draws)]
    alone_a, alone_b = GameRandom(5), GameRandom(6)
    assert interleaved[0::2] == [_call(alone_a, _draws), _call(alone_a, _draws)]
    assert interleaved[1::2] == [_call(alone_b, _draws), _call(alone_b, _draws)]


def test_env_calls_never_move_the_modules_own_generator_and_other_code_gets_its_numbers(opened):
    random.seed(9)
    state = random.getstate()
    _call(GameRandom(3), _draws)  # a game draws
    assert random.getstate() == state
    assert all(getattr(random, name) != getattr(GENERATOR, name) for name in NAMES)  # stand-ins while a game is open
    assert _draws() == _expected(random.Random(9))  # outside env calls: the module's own numbers


def test_the_module_is_its_own_again_once_the_last_game_closes():
    global_random.open_game()
    global_random.open_game()
    global_random.close_game()
    assert random.shuffle != GENERATOR.shuffle  # one game still open
    global_random.close_game()
    assert all(getattr(random, name) == getattr(GENERATOR, name) for name in NAMES)


def test_another_threads_draws_during_a_games_call_are_not_the_games(opened):
    game = GameRandom(11)
    inside, outside = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        inside.wait(5)
        random.seed(77)
        seen["other"] = random.random()
        outside.set()

    def env_call():
        inside.set()
        outside.wait(5)  # the other thread draws while this call runs
        return _draws()

    thread = threading.Thread(target=other_thread)
    thread.start()
    try:
        got = _call(game, env_call)
    finally:
        thread.join(5)
    assert got == _expected(random.Random(11))
    assert seen["other"] == random.Random(77).random()


def test_an_env_step_that_raises_ends_its_call_and_close_restores_the_module():
    from unstable_core.builtin.env_textarena import TextArenaGame

    class Failing:
        state = None

        def reset(self, num_players, seed):
            return None

        def step(self, action):
            raise RuntimeError("env broke")

        def close(self):
            return {}, {}

    game = TextArenaGame(Failing(), invalid_move_allowance=0)
    game.reset(num_players=2, seed=1)
    with pytest.raises(RuntimeError, match="env broke"):
        game.step("[x]")
    random.seed(4)
    assert random.random() == random.Random(4).random()  # no game's call is running any more
    game.close()
    game.close()  # closing twice counts once
    assert all(getattr(random, name) == getattr(GENERATOR, name) for name in NAMES)
