"""Per-step values from ``prepare`` reach ``loss`` by step (game, seat, turn), whatever the chunk."""

import pytest
import torch

from unstable_core import Step, Turn
from unstable_hf.step_values import StepValues


def step(game, player=0, turn=0):
    t = Turn(player_id=player, observation="o", prompt="p", completion="c", action="a", format_ok=True)
    return Step(env_id="E", game_idx=game, player_id=player, turn_index=turn, num_turns=1, turn=t, final_reward=0.0, reward=0.0)


def test_values_are_found_by_step_in_any_order_and_numbers_are_metrics():
    steps = [step(0), step(0, player=1), step(1, turn=1), step(2)]
    values = StepValues()
    metrics = values.split(steps, {"adv": [0.5, -1.0, 2.0, 3.0], "ret": torch.tensor([1.0, 2.0, 3.0, 4.0]), "mean": 0.25,
                                   "norm": torch.tensor(2.0)})
    assert metrics == {"mean": 0.25, "norm": 2.0}
    chunk = [step(2), step(0, player=1)]  # copies, in another order
    assert values.of(chunk, "adv") == [3.0, -1.0] and values.of(chunk, "ret") == [4.0, 2.0]
    with pytest.raises(KeyError, match="no per-step values named 'value'.*adv, ret"):
        values.of(chunk, "value")


def test_a_wrong_length_or_an_ambiguous_step_is_named():
    values = StepValues()
    with pytest.raises(ValueError, match="prepare returned 1 values of 'adv' for a batch of 2 steps"):
        values.split([step(0), step(1)], {"adv": [1.0]})
    values.split([step(0), step(0), step(1)], {"same": [1.0, 1.0, 2.0], "differ": [1.0, 3.0, 2.0]})
    assert values.of([step(0)], "same") == [1.0]  # the same step twice with the same value: fine
    with pytest.raises(ValueError, match="game 0, seat 0, turn 0"):
        values.of([step(0)], "differ")
