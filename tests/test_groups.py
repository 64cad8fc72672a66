"""Grouped games (`collection.group_size`, `branch_turn`) and group baselines (GRPO, RLOO)."""

import asyncio
from collections import defaultdict

import pytest

import unstable_core
from unstable_core import ConfigError, Step, Turn, group_advantages, hookimpl
from unstable_core.testing import toy_config, toy_plugin


def step(game, reward, group=None, player=0, turn=0):
    t = Turn(player_id=player, observation="o", prompt="p", completion="c", action="a", format_ok=True)
    return Step(env_id="E", game_idx=game, player_id=player, turn_index=turn, num_turns=1, turn=t, final_reward=reward,
                reward=reward, group_id=group)


def test_the_mean_baseline_and_its_std_scale_by_hand():
    steps = [step(0, 1.0, 0), step(1, -1.0, 0), step(2, 1.0, 0), step(3, 0.0, 0)]
    # mean 0.25: advantages 0.75, -1.25, 0.75, -0.25
    assert group_advantages(steps) == pytest.approx([0.75, -1.25, 0.75, -0.25])
    # population std: sqrt((0.5625 + 1.5625 + 0.5625 + 0.0625) / 4) = sqrt(0.6875)
    std = 0.6875 ** 0.5
    assert group_advantages(steps, scale="std") == pytest.approx([0.75 / std, -1.25 / std, 0.75 / std, -0.25 / std])


def test_leave_one_out_by_hand():
    steps = [step(0, 1.0, 5), step(1, -1.0, 5), step(2, 1.0, 5)]
    # game 0: 1 - mean(-1, 1) = 1; game 1: -1 - mean(1, 1) = -2; game 2: 1 - 0 = 1
    assert group_advantages(steps, baseline="leave-one-out") == pytest.approx([1.0, -2.0, 1.0])


def test_a_one_game_group_gives_zero_advantages_to_every_step_under_leave_one_out():
    """RLOO's baseline is the mean of the group's other games; a group of one game has none, and
    its own value would be a baseline that depends on its own actions: every step of it gets 0,
    whatever its steps' rewards (a step penalty), and the game beside it in a group of two does not."""
    lone = [step(4, 1.5, 4, turn=0), step(4, -0.5, 4, turn=1)]  # one game, two turns, rewards apart
    assert group_advantages(lone, baseline="leave-one-out") == [0.0, 0.0]
    assert group_advantages(lone, baseline="leave-one-out", scale="std") == [0.0, 0.0]
    pair = [step(5, 1.5, 5, turn=0), step(5, -0.5, 5, turn=1), step(6, 2.0, 5)]
    # game 5's baseline is game 6's value 2; game 6's is game 5's value 0.5
    assert group_advantages(pair, baseline="leave-one-out") == pytest.approx([-0.5, -2.5, 1.5])


def test_the_sample_std_divides_by_k_minus_one_as_trl_and_verl_do(toy_system):
    """``std = "sample"``: the group's std with Bessel's correction (torch.std's default, which TRL's
    and verl's GRPO use): advantages sqrt((k - 1) / k) of the population std's; one game: 0."""
    import torch

    values = [1.0, -1.0, 1.0, 0.0]
    steps = [step(i, v, 0) for i, v in enumerate(values)]
    sample = float(torch.tensor(values, dtype=torch.float64).std())
    mean = sum(values) / 4
    assert group_advantages(steps, scale="std", std="sample", eps=0.0) == pytest.approx([(v - mean) / sample for v in values])
    population = group_advantages(steps, scale="std", eps=0.0)
    assert [a / b for a, b in zip(group_advantages(steps, scale="std", std="sample", eps=0.0), population)] == \
        pytest.approx([(3 / 4) ** 0.5] * 4)
    assert group_advantages([step(9, 2.0, 9)], scale="std", std="sample") == [0.0]
    transform = unstable_core.build_component("reward_transform", "group-baseline", {"scale": "std", "std": "sample"},
                                              plugins=toy_system)
    assert [s.reward for s in transform(steps)] == pytest.approx(group_advantages(steps, scale="std", std="sample"))


def test_groups_are_per_group_and_seat_and_a_game_counts_once_whatever_its_turns():
    steps = [
        step(0, 1.0, 0, turn=0), step(0, 0.0, 0, turn=1),  # game 0 seat 0: two turns, value 0.5
        step(1, -0.5, 0),                                   # game 1 seat 0: value -0.5
        step(0, 2.0, 0, player=1), step(1, 4.0, 0, player=1),  # seat 1 of the same group: its own group
        step(7, 3.0, None), step(8, 3.0, None),             # ungrouped: each game a group of one
    ]
    # seat 0 baseline: mean(0.5, -0.5) = 0 (a per-step mean would be 1/6); seat 1 baseline 3
    assert group_advantages(steps) == pytest.approx([1.0, 0.0, -0.5, -1.0, 1.0, 0.0, 0.0])
    # leave-one-out in a group of one game gives 0
    assert group_advantages([step(9, 2.0, 9)], baseline="leave-one-out") == [0.0]
    # equal values: zeros under the std scale, whatever eps
    assert group_advantages([step(0, 1.0, 0), step(1, 1.0, 0)], scale="std") == [0.0, 0.0]


def test_the_transform_writes_the_advantages_into_the_rewards(toy_system):
    spec = toy_system.get("reward_transform", "group-baseline")
    assert spec.stage == "sampling" and spec.needs_groups
    transform = unstable_core.build_component("reward_transform", "group-baseline", {"baseline": "leave-one-out"},
                                              plugins=toy_system)
    out = transform([step(0, 1.0, 3), step(1, 0.0, 3)])
    assert [s.reward for s in out] == [1.0, -1.0] and [s.final_reward for s in out] == [1.0, 0.0]


class Games:
    def __init__(self):
        self.results = []

    @hookimpl
    def unstable_game_end(self, ctx):
        self.results.append(ctx.result)


def grouped_run(make_plugin_system, tmp_path, **collection):
    games = Games()
    system = make_plugin_system(toy_plugin, games)
    cfg = toy_config(
        train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 2}],
        buffer={"name": "episode", "capacity": 256},
        collection={"num_train_games": 8, "num_eval_games": 8, "eval_games": 8, "group_size": 4, **collection},
        training={"learning_steps": 3, "batch_size": 16, "filter_zero_advantage": False},
    )
    job = unstable_core.build(cfg, run_dir=tmp_path / "run", plugins=system)
    end = job.start()
    assert end.status == "completed"
    return job, [r for r in games.results if r.game.mode == "train"]


def test_a_group_is_one_seed_and_seating_played_with_other_sampling_seeds_and_drawn_whole(make_plugin_system, tmp_path):
    job, results = grouped_run(make_plugin_system, tmp_path)
    groups = defaultdict(list)
    for r in results:
        groups[r.game.group_id].append(r)
    assert len(groups) >= 4
    differs = 0
    for gid, members in groups.items():
        members.sort(key=lambda r: r.game.group_index)
        first = members[0].game
        assert first.game_idx == gid and [r.game.group_index for r in members] == [0, 1, 2, 3]
        assert {r.game.seed for r in members} == {first.seed}
        assert all([s.uid for s in r.game.seats] == [s.uid for s in first.seats] for r in members)
        assert len({r.game.game_idx for r in members}) == 4
        picks = [tuple(t.action for t in r.trajectories[0].turns) for r in members]
        differs += len(set(picks)) > 1
    assert differs >= len(groups) // 2  # the sampling seeds differ: the same table picks differently
    batches = job.roles.learner.learner.batches
    assert len(batches) == 3
    for batch in batches:
        by_group = defaultdict(set)
        for s in batch.steps:
            assert s.group_id is not None
            by_group[s.group_id].add((s.game_idx, s.group_index))
        assert all(len(members) == 4 for members in by_group.values())  # a group is drawn whole


def test_branch_turn_shares_the_opening_turns_of_a_group(make_plugin_system, tmp_path):
    def first_picks(results):
        groups = defaultdict(set)
        for r in results:
            groups[r.game.group_id].add(r.trajectories[0].turns[0].action)
        return [len(picks) for picks in groups.values()]

    _, shared = grouped_run(make_plugin_system, tmp_path / "shared", branch_turn=1)
    assert all(r.game.branch_turn == 1 for r in shared)
    assert set(first_picks(shared)) == {1}  # player 0's first turn is the group's
    assert any(len({r.trajectories[1].turns[0].action for r in shared if r.game.group_id == g}) > 1
               for g in {r.game.group_id for r in shared})  # the second turn branches
    _, branched = grouped_run(make_plugin_system, tmp_path / "branched", branch_turn=0)
    assert max(first_picks(branched)) > 1


def test_the_first_game_of_a_group_plays_as_the_ungrouped_game_would(make_plugin_system, tmp_path):
    _, grouped = grouped_run(make_plugin_system, tmp_path / "g", mode="sync")
    _, alone = grouped_run(make_plugin_system, tmp_path / "a", mode="sync", group_size=1)
    first = min(grouped, key=lambda r: r.game.game_idx)
    other = min(alone, key=lambda r: r.game.game_idx)
    assert first.game.game_idx == other.game.game_idx and first.game.seed == other.game.seed
    assert first.game.group_id == first.game.game_idx and other.game.group_id is None
    assert [[t.action for t in tr.turns] for tr in first.trajectories] == [[t.action for t in tr.turns] for tr in other.trajectories]


@pytest.mark.parametrize("overrides, message", [
    ({"collection": {"group_size": 4}, "buffer": {"name": "step"}},
     "collection.group_size = 4: buffer 'step' stores single steps and would split the groups"),
    ({"reward": {"sampling": [{"name": "group-baseline"}]}},
     "reward.sampling.0 \\(group-baseline\\) compares the games of a group: set collection.group_size to 2 or more"),
    ({"collection": {"group_size": 4}, "buffer": {"name": "episode"},
      "reward": {"sampling": [{"name": "normalize"}, {"name": "group-baseline"}]}},
     "reward.sampling.1 \\(group-baseline\\) comes after reward.sampling.0 \\(normalize\\), which mixes"),
    ({"collection": {"branch_turn": 2}}, "collection.branch_turn = 2 branches the games of a group: set collection.group_size"),
])
def test_config_check_names_each_conflict_in_one_line(toy_system, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message) as caught:
        unstable_core.build(toy_config(**overrides), run_dir=tmp_path / "run", plugins=toy_system)
    assert len(str(caught.value).splitlines()) == 1


def test_the_cli_refuses_a_split_group_with_status_2(cli, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('train_envs = ["KuhnPoker-v0-train"]\nopponents = ["random-valid"]\n'
                    'model = { model = "random-valid", backend = "scripted" }\n'
                    'collection = { group_size = 8 }\nreward = { sampling = [{ name = "group-baseline" }] }\n')
    out = cli("config", "check", str(path))
    assert out.returncode == 0, out.stderr  # no learner: nothing is drawn, groups are only played
    path.write_text(path.read_text().replace('collection = { group_size = 8 }', 'collection = { group_size = 1 }'))
    out = cli("config", "check", str(path))
    assert out.returncode == 2 and "set collection.group_size to 2 or more" in out.stderr and "Traceback" not in out.stderr


def test_a_replayed_group_is_scheduled_whole(make_plugin_system, tmp_path):
    job, _ = grouped_run(make_plugin_system, tmp_path)
    league = job.roles.league
    state = asyncio.run(league.state_dict())
    first = asyncio.run(league.schedule(4, "train"))  # one group
    state["in_flight"] = [s.model_dump(mode="json") for s in first]
    asyncio.run(league.load_state_dict(state))
    again = asyncio.run(league.schedule(1, "train"))  # asks for 1: gets the whole replayed group
    assert [s.game_idx for s in again] == [s.game_idx for s in first]


@pytest.mark.parametrize("baseline", ["mean", "leave-one-out"])
@pytest.mark.parametrize("scale", ["none", "std"])
def test_games_of_equal_value_give_exact_zeros_despite_rounding(baseline, scale):
    """Three games worth 0.1 each: fsum([0.1] * 3) / 3 is not 0.1 in floats, but the group has no
    spread, so every advantage is exactly 0 (the buffer drops exact zeros for REINFORCE), under
    either baseline and scale; a group that differs by more than rounding keeps its advantages."""
    import math

    assert math.fsum([0.1] * 3) / 3 != 0.1  # the rounding the check must see through
    steps = [step(i, 0.1, 0) for i in range(3)]
    assert group_advantages(steps, baseline=baseline, scale=scale) == [0.0, 0.0, 0.0]
    apart = [step(i, v, 0) for i, v in enumerate([0.1, 0.1, 0.1 + 1e-9])]
    assert all(a != 0.0 for a in group_advantages(apart, baseline=baseline, scale=scale)[2:])


def test_group_spread_by_hand():
    """The reward spread of a batch's groups: the mean over groups of two or more games of the
    population std of their game values, and the share of those groups with no spread (TRL's
    frac_reward_zero_std); a group of one game has no spread to measure."""
    from unstable_core.groups import group_spread

    steps = [step(0, 1.0, 0), step(1, -1.0, 0),  # std 1
             step(2, 0.1, 1), step(3, 0.1, 1), step(4, 0.1, 1),  # equal within rounding: std 0
             step(5, 1.0, 2), step(5, 0.0, 2, turn=1), step(6, 0.5, 2), step(7, 1.0, 2),  # game 5 counts once: 0.5
             step(8, 3.0)]  # ungrouped: a group of one game
    figures = group_spread(steps)
    third = (((0.5 - 2 / 3) ** 2 * 2 + (1 - 2 / 3) ** 2) / 3) ** 0.5
    assert figures == pytest.approx({"group_reward_std_mean": (1.0 + 0.0 + third) / 3, "group_zero_std_frac": 1 / 3})
    assert group_spread([step(0, 1.0), step(1, 2.0)]) == {}


def test_a_grouped_run_logs_the_spread_of_each_batchs_groups(make_plugin_system, tmp_path):
    import json
    import statistics

    job, _ = grouped_run(make_plugin_system, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["type"] == "train"]
    batches = job.roles.learner.learner.batches  # no sampling transform: the rewards the groups had
    assert len(train) == len(batches) == 3
    for record, batch in zip(train, batches):
        values = defaultdict(lambda: defaultdict(list))
        for s in batch.steps:
            values[(s.group_id, s.player_id)][s.game_idx].append(s.reward)
        spreads = [statistics.pstdev([statistics.fmean(v) for v in games.values()]) for games in values.values()]
        assert record["group_reward_std_mean"] == pytest.approx(statistics.fmean(spreads), abs=1e-12)
        assert record["group_zero_std_frac"] == pytest.approx(sum(s < 1e-12 for s in spreads) / len(spreads))
