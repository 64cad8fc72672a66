"""Reward transforms against hand-computed numbers."""

import math

import pytest

from unstable_core.builtin.transforms import (
    InvalidMoveOptions,
    Normalize,
    NormalizeOptions,
    PenaltyForInvalidMove,
    PenaltyForTruncation,
    RewardForFormat,
    RewardForFormatOptions,
    RoleAdvantage,
    RoleAdvantageOptions,
    ScaleNegative,
    ScaleNegativeOptions,
    TruncationOptions,
    win_draw_loss,
    zscore,
)
from unstable_core.types import Step, Turn


def step(reward, env="E", fmt=True, invalid=False, truncated=False):
    t = Turn(player_id=0, observation="o", prompt="p", completion="c", action="[a]", format_ok=fmt, invalid=invalid, truncated=truncated)
    return Step(env_id=env, game_idx=0, player_id=0, turn_index=0, num_turns=1, turn=t, final_reward=reward, reward=reward)


def test_win_draw_loss():
    assert win_draw_loss({0: 1, 1: -1}, "E") == {0: 1.0, 1: -1.0}
    assert win_draw_loss({0: 0, 1: 0}, "E") == {0: 0.0, 1: 0.0}
    assert win_draw_loss({0: 3, 1: 5, 2: 5}, "E") == {0: -1.0, 1: 0.0, 2: 0.0}
    assert win_draw_loss({0: 0.4}, "E") == {0: 1.0}


def test_role_advantage_reads_baseline_before_update():
    t = RoleAdvantage(RoleAdvantageOptions(tau=0.5), by_env=False)
    # game 1: baselines 0 -> advantages equal rewards; baselines become 0.5, -0.5
    assert t({0: 1.0, 1: -1.0}, "E") == {0: 1.0, 1: -1.0}
    # game 2: 1 - 0.5 = 0.5 ; -1 - (-0.5) = -0.5 ; baselines -> 0.75, -0.75
    assert t({0: 1.0, 1: -1.0}, "E") == {0: 0.5, 1: -0.5}
    # game 3: draw: 0 - 0.75 = -0.75 ; 0 + 0.75 = 0.75
    assert t({0: 0.0, 1: 0.0}, "E") == {0: -0.75, 1: 0.75}


def test_role_advantage_update_first_option():
    t = RoleAdvantage(RoleAdvantageOptions(tau=0.5, update_before_read=True), by_env=False)
    assert t({0: 1.0}, "E") == {0: 0.5}  # baseline 0.5 first, then 1 - 0.5
    assert t({0: 1.0}, "E") == {0: 0.25}  # baseline 0.75


def test_role_advantage_by_env_keeps_separate_baselines():
    t = RoleAdvantage(RoleAdvantageOptions(tau=0.5), by_env=True)
    t({0: 1.0}, "A")
    assert t({0: 1.0}, "B") == {0: 1.0}  # B's baseline still 0
    assert t({0: 1.0}, "A") == {0: 0.5}


def test_reward_for_format_and_invalid_penalty():
    f = RewardForFormat(RewardForFormatOptions(reward=0.25, penalty=-0.5))
    assert f(step(1.0, fmt=True)).reward == 1.25
    assert f(step(1.0, fmt=False)).reward == 0.5
    p = PenaltyForInvalidMove(InvalidMoveOptions(reward=0.1, penalty=-2.0))
    assert p(step(-1.0, invalid=True)).reward == -3.0
    assert p(step(-1.0, invalid=False)).reward == pytest.approx(-0.9)
    # composing keeps final_reward as it was
    assert p(f(step(1.0, fmt=False, invalid=True))).final_reward == 1.0


def test_reward_for_format_exact_pattern():
    exact = RewardForFormat(RewardForFormatOptions(reward=0.5, penalty=-1.0, exact=r"\\boxed\{\[[a-z]+\]\}"))

    def answer(completion, fmt=True):
        return step(0.0, fmt=fmt).model_copy(update={"turn": step(0.0, fmt=fmt).turn.model_copy(update={"completion": completion})})

    assert exact(answer("\\boxed{[bet]}\n")).reward == 0.5
    # the template found a box (format_ok), but there is text around or inside it
    assert exact(answer("\\boxed{[ card\\boxed{[bet]}")).reward == -1.0
    assert exact(answer("so \\boxed{[bet]}")).reward == -1.0
    assert exact(answer("\\boxed{[]}")).reward == -1.0
    assert exact(answer("\\boxed{[bet]}", fmt=False)).reward == -1.0  # the template's verdict still counts
    with pytest.raises(ValueError, match="not a regular expression"):
        RewardForFormatOptions(exact="[unclosed")


def test_truncation_penalty():
    cut = PenaltyForTruncation(TruncationOptions())
    assert cut(step(1.0, truncated=True)).reward == 0.0 and cut(step(1.0, truncated=True)).final_reward == 1.0
    assert cut(step(1.0, truncated=False)).reward == 1.0
    assert PenaltyForTruncation(TruncationOptions(reward=0.5, penalty=-3.0))(step(-1.0, truncated=True)).reward == -4.0


def test_normalize_hand_computed():
    # rewards 1, -1, 1, 3 : mean 1, population std sqrt((0+4+0+4)/4) = sqrt(2)
    out = Normalize(NormalizeOptions(eps=0.0 + 1e-12), by_env=False)([step(r) for r in (1, -1, 1, 3)])
    s = math.sqrt(2)
    assert [o.reward for o in out] == pytest.approx([0, -2 / s, 0, 2 / s])


def test_normalize_zero_variance_gives_zeros_never_nan():
    out = Normalize(NormalizeOptions(), by_env=False)([step(0.1 * 3) for _ in range(5)])
    assert [o.reward for o in out] == [0.0] * 5
    assert zscore([], 1e-8) == []
    assert zscore([7.0], 1e-8) == [0.0]


def test_normalize_by_env_groups():
    steps = [step(1, "A"), step(-1, "A"), step(5, "B"), step(5, "B")]
    out = Normalize(NormalizeOptions(eps=1e-8), by_env=True)(steps)
    assert [o.reward for o in out] == pytest.approx([1, -1, 0, 0], abs=1e-6)


def test_scale_negative_after_normalize():
    normed = Normalize(NormalizeOptions(eps=1e-12), by_env=False)([step(r) for r in (1, -1, 1, 3)])
    s = math.sqrt(2)
    half = ScaleNegative(ScaleNegativeOptions(scale=0.5))(normed)
    assert [o.reward for o in half] == pytest.approx([0, -1 / s, 0, 2 / s])
    assert [o.final_reward for o in half] == [1, -1, 1, 3]
    assert [o.reward for o in ScaleNegative(ScaleNegativeOptions())(normed)] == pytest.approx([0, 0, 0, 2 / s])
    assert [o.reward for o in ScaleNegative(ScaleNegativeOptions(scale=1.0))(normed)] == [o.reward for o in normed]
    with pytest.raises(ValueError):
        ScaleNegativeOptions(scale=1.5)


def test_std_plus_eps_denominator():
    out = zscore([0.0, 2.0], eps=1.0)  # mean 1, std 1 -> (+-1) / 2
    assert out == [-0.5, 0.5]


def test_a_seat_with_an_untrainable_turn_gives_the_buffer_nothing():
    """A completion without token ids (a hosted API's) is marked ``trainable = False``: the
    learner never trains on that seat's turns, while the other trained seats still count."""
    from unstable_core.runtime.roles.rewards import RewardPipelines
    from unstable_core.testing import sample_result

    result = sample_result(train_seats=[0, 1])
    assert [e[0].player_id for e in RewardPipelines().episodes(result)] == [0, 1]
    turn = result.trajectories[1].turns[0]
    result.trajectories[1].turns[0] = turn.model_copy(update={"trainable": False, "completion_token_ids": []})
    assert [e[0].player_id for e in RewardPipelines().episodes(result)] == [0]


def test_role_advantage_baselines_learn_from_the_trained_seats_only():
    """SPIRAL's role-advantage estimation updates a role's baseline from the trained player's
    games only: a fixed opponent's rewards in a seat move nothing. Seat 0 trained in game 1
    (the learner wins), seat 1 in game 2 (the opponent, in seat 0, wins again): seat 1's baseline
    is still 0 there, so its advantage is the whole -1 (with the opponent's game-1 reward mixed
    in, it would be -1 - (-0.5) = -0.5)."""
    from unstable_core.runtime.roles.rewards import RewardPipelines
    from unstable_core.testing import sample_result

    transform = RoleAdvantage(RoleAdvantageOptions(tau=0.5), by_env=False)
    pipelines = RewardPipelines(final=[transform])
    (first,) = pipelines.episodes(sample_result(rewards={0: 1.0, 1: -1.0}, train_seats=[0]))
    assert first[0].player_id == 0 and first[0].final_reward == 1.0
    assert dict(transform.baseline) == {0: 0.5}  # seat 1 (the fixed opponent's) left alone
    (second,) = pipelines.episodes(sample_result(rewards={0: 1.0, 1: -1.0}, train_seats=[1]))
    assert second[0].player_id == 1 and second[0].final_reward == -1.0
    assert dict(transform.baseline) == {0: 0.5, 1: -0.5}
    # both seats trained (self-play): both baselines learn, as SPIRAL's do
    pipelines.episodes(sample_result(rewards={0: 1.0, 1: -1.0}, train_seats=[0, 1]))
    assert dict(transform.baseline) == {0: 0.75, 1: -0.75}
    # called directly, without the seats, every seat counts (as before)
    assert transform({0: 1.0, 1: -1.0}, "E") == {0: 0.25, 1: -0.25}
