"""Env calls on worker threads: a blocking env step stalls only its own game."""

from __future__ import annotations

import asyncio
import threading

import pytest

import unstable_core
from unstable_core import EnvSpec, GameSpec, ModelRef
from unstable_core.builtin.inference_scripted import ScriptedInference
from unstable_core.runtime.game.envcalls import EnvCalls
from unstable_core.runtime.game.runner import GameRunner
from unstable_core.testing import PickBestGame, ToyProvider


class Rendezvous(ToyProvider):
    """Game 0's first step waits until game 1 has stepped: on a single event loop that calls envs
    inline, game 1 cannot step while game 0 blocks, so game 0 gives up after ``wait_s``."""

    def __init__(self, wait_s: float) -> None:
        self.stepped = threading.Event()
        self.wait_s = wait_s
        self.made = 0

    def make(self, env):
        provider, first = self, self.made == 0
        self.made += 1

        class Game(PickBestGame):
            def step(self, action):
                if first and not provider.stepped.wait(provider.wait_s):
                    raise TimeoutError("the other game never stepped")
                provider.stepped.set()
                return super().step(action)

        return Game()


def play_two(calls: EnvCalls, provider) -> list:
    template = unstable_core.build_component("template", "default")
    runner = GameRunner(provider, lambda n: template, lambda n: ScriptedInference(), env_calls=calls)
    seats = [ModelRef(uid="a", backend="scripted", model="random-valid")] * 2
    specs = [GameSpec(game_idx=i, seed=i, env=EnvSpec(env_id="PickBest-v0"), seats=seats) for i in range(2)]

    async def both():
        try:
            return await asyncio.gather(*(runner.play(s) for s in specs))
        finally:
            calls.close()

    return asyncio.run(both())


def test_on_the_loop_a_blocking_step_stalls_the_other_games():
    results = play_two(EnvCalls("loop"), Rendezvous(wait_s=0.2))
    assert results[0].outcome == "failed" and "never stepped" in results[0].error


@pytest.mark.parametrize("calls", [EnvCalls("threads"), EnvCalls("auto", slow_s=0.0, slow_calls=1)], ids=["threads", "auto"])
def test_on_threads_a_blocking_step_stalls_only_its_own_game(calls):
    results = play_two(calls, Rendezvous(wait_s=60))
    assert [r.outcome for r in results] == ["finished", "finished"]
    assert all(len(t.turns) == 1 for r in results for t in r.trajectories)


def test_auto_moves_only_slow_env_ids_to_threads():
    calls = EnvCalls("auto", slow_s=3600)
    results = play_two(calls, Rendezvous(wait_s=0.2))
    assert calls.slow_envs == set() and calls._workers == []  # nothing was slow: every call on the loop
    assert results[0].outcome == "failed"
    calls = EnvCalls("auto", slow_s=0.0, slow_calls=1)
    play_two(calls, Rendezvous(wait_s=60))
    assert calls.slow_envs == {"PickBest-v0"}


def test_auto_lets_the_first_slow_calls_of_an_env_id_pass():
    calls = EnvCalls("auto", slow_s=0.0, slow_calls=3)
    assert [calls.mark_slow("a"), calls.mark_slow("a"), calls.mark_slow("b"), calls.mark_slow("a")] == [False, False, False, True]
    assert calls.slow_envs == {"a"}


def test_auto_counts_slow_calls_within_a_window_of_an_env_ids_calls():
    """A busy machine makes a fast call slow now and then: such calls, spread over a run, must not
    add up to a move (they once moved every env to threads within seconds in a Ray actor)."""
    calls = EnvCalls("auto", slow_s=0.0, slow_calls=3, window_calls=100)
    assert [calls.mark_slow("a"), calls.mark_slow("a")] == [False, False]
    calls.played("a", 60)
    calls.played("b", 100)  # another env id's window
    assert calls.mark_slow("a") is True  # three within 60 calls
    calls = EnvCalls("auto", slow_s=0.0, slow_calls=3, window_calls=100)
    for _ in range(5):  # two slow calls in every window of 100: never three in one
        assert [calls.mark_slow("a"), calls.mark_slow("a")] == [False, False]
        calls.played("a", 100)
    assert calls.slow_envs == set()


def test_the_runner_counts_the_env_calls_it_timed_on_the_loop():
    calls = EnvCalls("auto", slow_s=3600)
    results = play_two(calls, ToyProvider())
    assert calls.loop_calls == {"PickBest-v0": sum(1 + 2 * r.num_turns for r in results)} and calls.slow_envs == set()


def test_an_env_call_that_raises_on_a_thread_fails_its_game_with_the_reason():
    class Broken(ToyProvider):
        def make(self, env):
            class Game(PickBestGame):
                def step(self, action):
                    raise KeyError("board")

            return Game()

    results = play_two(EnvCalls("threads"), Broken())
    assert all(r.outcome == "failed" and "KeyError" in r.error and "board" in r.error for r in results)


def test_a_tournament_gives_the_same_records_with_env_calls_on_threads(make_plugin_system, tmp_path):
    records = {}
    for mode in ("loop", "threads"):
        cfg = {
            "name": "t", "train_envs": ["TicTacToe-v0-train"], "opponents": ["random-valid", "greedy"],
            "collection": {"tournament_games": 60, "env_calls": mode}, "trackers": [{"name": "jsonl"}],
        }
        result = unstable_core.run(cfg, run_dir=tmp_path / mode, plugins=make_plugin_system())
        records[mode] = [r.model_dump(exclude={"time"}) for r in result.eval_records]
    assert records["threads"] == records["loop"]
    assert sum(r["games"] for r in records["loop"]) == 120 and all(r["failed"] == 0 for r in records["loop"])


def _kuhn_transcript(disturb: bool) -> list[str]:
    """A KuhnPoker game played with fixed actions; ``disturb``: other code draws from the global
    ``random`` module between its moves, as other games in flight do."""
    import random

    from unstable_core.builtin.env_textarena import TextArenaOptions, TextArenaProvider
    from unstable_core.builtin.inference_scripted import agent_random_valid
    from unstable_core.builtin.templates import extract_boxed_action

    game = TextArenaProvider(TextArenaOptions()).make(EnvSpec(env_id="KuhnPoker-v0-train"))
    game.reset(num_players=2, seed=7)
    agent, seen, done = random.Random(3), [], False
    while not done:
        _pid, obs = game.observe()
        seen.append(obs)
        if disturb:
            random.seed(len(seen))
            random.random()
        done, _ = game.step(extract_boxed_action(agent_random_valid(obs, agent))[0])
    seen.append(repr(game.close()))
    return seen


def _raw_kuhn_transcript() -> list[str]:
    """The same game through TextArena's own API, nothing else drawing from ``random``."""
    import random

    import textarena as ta

    from unstable_core.builtin.inference_scripted import agent_random_valid
    from unstable_core.builtin.templates import extract_boxed_action

    env = ta.make("KuhnPoker-v0-train")
    env.reset(num_players=2, seed=7)
    env.state.error_allowance = 0
    agent, seen, done = random.Random(3), [], False
    while not done:
        _pid, obs = env.get_observation()
        seen.append(obs)
        done, _ = env.step(action=extract_boxed_action(agent_random_valid(obs, agent))[0])
    rewards, info = env.close()
    seen.append(repr(({int(k): float(v) for k, v in rewards.items()}, {int(k): dict(v) for k, v in info.items()})))
    return seen


def test_a_textarena_games_draws_depend_only_on_its_seed_and_moves():
    # KuhnPoker shuffles its deck from the global random module at every round: without the
    # wrapper's own generator per game the cards of round 2 on depend on what ran between the moves
    alone = _kuhn_transcript(disturb=False)
    assert len(alone) > 6  # several rounds were dealt
    assert _kuhn_transcript(disturb=True) == alone
    assert _raw_kuhn_transcript() == alone  # the cards TextArena deals that seed in a game played alone
