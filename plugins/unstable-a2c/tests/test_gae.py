"""GAE and per-turn rewards against hand-computed numbers."""

import pytest

from unstable_a2c.gae import episodes, gae, turn_rewards
from unstable_core import Step, Turn


def step(game, player, t, n, final, reward):
    turn = Turn(player_id=player, observation="o", prompt="p", prompt_token_ids=[5], completion="c", completion_token_ids=[6],
                action="[x]", format_ok=True)
    return Step(env_id="E", game_idx=game, player_id=player, turn_index=t, num_turns=n, turn=turn, final_reward=final, reward=reward)


def test_gae_matches_hand_computed_numbers():
    # gamma 0.9, lambda 0.8: delta_t = r_t + 0.9 V_{t+1} - V_t, A_t = delta_t + 0.72 A_{t+1}
    adv, ret = gae([0.0, 0.0, 1.0], [0.5, -0.2, 0.3], 0.9, 0.8)
    # delta_2 = 1 - 0.3 = 0.7; delta_1 = 0.27 + 0.2 = 0.47; delta_0 = -0.18 - 0.5 = -0.68
    assert adv == pytest.approx([-0.68 + 0.72 * (0.47 + 0.72 * 0.7), 0.47 + 0.72 * 0.7, 0.7], abs=1e-12)
    assert adv == pytest.approx([0.02128, 0.974, 0.7], abs=1e-12)
    assert ret == pytest.approx([0.52128, 0.774, 1.0], abs=1e-12)
    adv, ret = gae([-0.5, -1.0], [0.1, 0.2], 0.9, 0.8)
    assert adv == pytest.approx([-1.284, -1.2], abs=1e-12) and ret == pytest.approx([-1.184, -1.0], abs=1e-12)
    adv, ret = gae([1.0], [0.25], 0.9, 0.8)
    assert adv == pytest.approx([0.75]) and ret == pytest.approx([1.0])


def test_lambda_one_gives_discounted_returns_minus_values_and_zero_gives_td():
    rewards, values = [0.2, -0.1, 1.0], [0.3, 0.1, -0.4]
    adv, ret = gae(rewards, values, 0.5, 1.0)
    assert ret == pytest.approx([0.2 + 0.5 * -0.1 + 0.25 * 1.0, -0.1 + 0.5 * 1.0, 1.0])
    adv, _ = gae(rewards, values, 0.5, 0.0)
    assert adv == pytest.approx([0.2 + 0.5 * 0.1 - 0.3, -0.1 + 0.5 * -0.4 - 0.1, 1.0 + 0.4])


def test_the_final_reward_comes_at_the_last_turn_only_and_step_rewards_at_each():
    # a format penalty of -1 on the middle turn; the game won (+1)
    ep = [step(0, 0, 0, 3, 1.0, 1.0), step(0, 0, 1, 3, 1.0, 0.0), step(0, 0, 2, 3, 1.0, 1.0)]
    assert turn_rewards(ep) == [0.0, -1.0, 1.0]


def test_episodes_group_each_players_turns_in_order_and_refuse_partial_ones():
    steps = [step(3, 1, 1, 2, -1, -1), step(3, 0, 0, 2, 1, 1), step(3, 1, 0, 2, -1, -1), step(4, 0, 0, 1, 0, 0), step(3, 0, 1, 2, 1, 1)]
    assert sorted(episodes(steps)) == sorted([[2, 0], [1, 4], [3]])
    with pytest.raises(ValueError, match='game 3 player 1 has turns \\[1\\] of 2 .*episode'):
        episodes([step(3, 1, 1, 2, -1, -1)])
