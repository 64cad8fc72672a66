"""The env wrapper's seeding of the global ``random`` module, paid only by calls that draw."""

import random

from unstable_core.builtin import global_random

GENERATOR = random.seed.__self__  # the instance behind the module's functions
NAMES = [name for name in dir(random) if getattr(getattr(random, name), "__self__", None) is GENERATOR]
assert {"random", "getrandbits", "shuffle", "seed"} <= set(NAMES)


def _draws() -> list:
    deck = list(range(10))
    random.shuffle(deck)
    return [deck, random.random(), random.randint(0, 1000), random.choice("abcdef")]


def test_a_call_that_draws_gets_the_numbers_of_seeding_before_it():
    random.seed(123)
    expected = _draws()
    random.seed(999)  # some other state before the call
    global_random.arm(123)
    try:
        got = _draws()
    finally:
        global_random.disarm()
    assert got == expected
    assert random.shuffle == GENERATOR.shuffle  # the module's own functions again


def test_a_call_that_draws_nothing_leaves_the_module_as_it_was():
    random.seed(5)
    state = random.getstate()
    global_random.arm(77)
    assert all(getattr(random, name) != getattr(GENERATOR, name) for name in NAMES)  # stand-ins while armed
    global_random.disarm()
    assert random.getstate() == state  # not reseeded: nothing drew
    assert all(getattr(random, name) == getattr(GENERATOR, name) for name in NAMES)
    assert random.random() == random.Random(5).random()


def test_a_call_that_seeds_the_module_itself_gets_its_own_seed():
    random.seed(42)
    expected = _draws()
    global_random.arm(1)
    try:
        random.seed(42)  # TextArena's State seeds the module when it is given a seed
        got = _draws()
    finally:
        global_random.disarm()
    assert got == expected


def test_consecutive_armed_calls_each_start_from_their_own_seed():
    seen = []
    for seed in (3, 4, 3):
        global_random.arm(seed)
        try:
            seen.append(random.random())
            seen.append(random.random())
        finally:
            global_random.disarm()
    assert seen[:2] == seen[4:] != seen[2:4]
    assert seen[:2] == [random.Random(3).random(), (r := random.Random(3), r.random(), r.random())[2]]


def test_an_env_step_that_raises_leaves_the_module_s_own_functions():
    import pytest

    from unstable_core.builtin.env_textarena import TextArenaGame

    class Failing:
        state = None

        def reset(self, num_players, seed):
            return None

        def step(self, action):
            raise RuntimeError("env broke")

    game = TextArenaGame(Failing(), invalid_move_allowance=0)
    game.reset(num_players=2, seed=1)
    with pytest.raises(RuntimeError, match="env broke"):
        game.step("[x]")
    assert all(getattr(random, name) == getattr(GENERATOR, name) for name in NAMES)
