import json
import math
import os
import subprocess
import sys

import pytest

import unstable_core
from unstable_core import EnvSpec, load_plugins

KUHN = "openspiel/kuhn_poker"


@pytest.fixture(scope="module")
def system():
    return load_plugins(entry_points=True)


def openspiel_value(name, policy_factory, **params):
    """OpenSpiel's own exploitability of a policy built from its own game object."""
    import pyspiel
    from open_spiel.python.algorithms import exploitability

    game = pyspiel.load_game(name, params)
    return exploitability.exploitability(game, policy_factory(game))


def test_random_valid_is_as_exploitable_as_openspiels_uniform_policy(system):
    from open_spiel.python.policy import UniformRandomPolicy

    from unstable_openspiel.exploit import exploitability

    for game in ("kuhn_poker", "leduc_poker"):
        report = exploitability("random-valid", f"openspiel/{game}", plugins=system)
        assert report.exploitability == pytest.approx(openspiel_value(game, UniformRandomPolicy), abs=1e-9)
        assert report.invalid_mass == 0.0
    assert exploitability("random-valid", KUHN, plugins=system).exploitability == pytest.approx(0.4583, abs=1e-4)


def test_cfr_with_its_default_iterations_is_nearly_unexploitable_and_first_valid_is_fully(system):
    from unstable_openspiel.exploit import exploitability

    assert exploitability("cfr", KUHN, plugins=system).exploitability < 0.01
    assert exploitability("cfr:10", KUHN, plugins=system).exploitability > exploitability("cfr:200", KUHN, plugins=system).exploitability
    assert exploitability("first-valid", KUHN, plugins=system).exploitability == pytest.approx(1.0)  # always pass: 1 chip lost a game


def tournament(tmp_path, name, opponents, games, env_id=KUHN, **extra):
    cfg = {"name": name, "seed": 0, "train_envs": [env_id], "opponents": opponents, "model_sampler": {"name": "fixed"},
           "collection": {"tournament_games": games, "num_train_games": 32},
           "trackers": [{"name": "jsonl", "games": True}], **extra}
    result = unstable_core.run(cfg, run_dir=tmp_path / name)
    lines = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    return result, [r for r in lines if r["type"] == "game"]


def test_best_response_to_random_valid_wins_what_openspiel_says_it_is_worth(system, tmp_path):
    from unstable_openspiel import policies
    from unstable_openspiel.agents import scripted_policy

    _, values = policies.best_response_policy(KUHN, {}, scripted_policy("random-valid", KUHN, {}))
    expected = sum(values) / 2  # seats alternate at random: the mean of the two seats' best-response values
    br = {"uid": "br", "model": "best-response:random-valid", "backend": "openspiel"}
    result, games = tournament(tmp_path, "br", [br, "random-valid"], 6000)
    assert result.status == "completed" and not any(g["outcome"] == "failed" for g in games)
    returns = [g["rewards"][str(g["seats"].index("br"))] for g in games if "br" in g["seats"] and "random-valid" in g["seats"]]
    mean = sum(returns) / len(returns)
    se = math.sqrt(sum((r - mean) ** 2 for r in returns) / (len(returns) - 1) / len(returns))
    assert len(returns) > 1500 and abs(mean - expected) < 4 * se, (mean, expected, se)
    # the evaluation record carries the same chips: its mean return over the games br played against random-valid
    (record,) = [r for r in result.eval_records if r.model == "br" and r.opponent == "random-valid"]
    assert record.games == len(returns) and record.mean_return == pytest.approx(mean, abs=1e-12)


@pytest.mark.parametrize("game,kwargs", [("kuhn_poker", {}), ("leduc_poker", {}), ("liars_dice", {}), ("tic_tac_toe", {}),
                                         ("goofspiel", {"num_cards": 4})])
def test_every_known_game_plays_to_the_end_with_scripted_agents(game, kwargs, tmp_path):
    env = {"env_id": f"openspiel/{game}", "kwargs": kwargs}
    result, games = tournament(tmp_path, game, ["random-valid", "first-valid"], 60, env_id=env)
    assert result.status == "completed" and len(games) == 60
    assert all(g["outcome"] == "finished" and g["invalid"] == 0 for g in games), games[:3]


def make(env_id=KUHN, allowance=0, **kwargs):
    from unstable_openspiel.env import OpenSpielOptions, OpenSpielProvider

    return OpenSpielProvider(OpenSpielOptions(invalid_move_allowance=allowance)).make(EnvSpec(env_id=env_id, kwargs=kwargs))


def test_a_player_sees_its_own_card_and_the_betting_never_the_opponents_card():
    deals = set()
    for seed in range(30):
        game = make()
        game.reset(num_players=2, seed=seed)
        pid, obs = game.observe()
        cards = game.state.history()[:2]  # the chance outcomes: player 0's card, player 1's
        mine, theirs = "JQK"[cards[pid]], "JQK"[cards[1 - pid]]
        assert f"Your card: {mine}." in obs and f"Your card: {theirs}" not in obs and "'[pass]', '[bet]'" in obs
        deals.add(tuple(cards))
        again = make()
        again.reset(num_players=2, seed=seed)
        assert again.state.history() == game.state.history()  # the seed decides the deal
    assert len(deals) == 6  # every deal happens


def test_an_invalid_move_loses_at_once_or_is_asked_again_within_the_allowance():
    game = make()
    game.reset(num_players=2, seed=0)
    pid, _ = game.observe()
    assert game.step("[raise]") == (True, True)
    rewards, info = game.close()
    assert rewards == {pid: -1.0, 1 - pid: 1.0} and info[pid]["invalid_move"]
    game = make(allowance=1)
    game.reset(num_players=2, seed=0)
    pid, _ = game.observe()
    assert game.step("bluff") == (False, True)
    again, obs = game.observe()
    assert again == pid and obs.startswith("Your last answer was not one of the available actions")
    assert game.step(" [ Bet ] ") == (False, False)  # case and spaces forgiven
    assert game.observe()[0] == 1 - pid


def test_returns_are_openspiels():
    game = make()
    game.reset(num_players=2, seed=3)
    for action in ("[bet]", "[bet]"):  # bet, call: showdown for 2 chips
        game.observe()
        done, invalid = game.step(action)
        assert not invalid
    assert done
    rewards, _ = game.close()
    assert sorted(rewards.values()) == [-2.0, 2.0] and rewards == dict(enumerate(game.state.returns()))


def cli(*args):
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "unstable_core.cli", *args], capture_output=True, text=True, env=env, timeout=300)


def test_the_cli_gives_the_uniform_policys_exploitability_as_json():
    done = cli("exploitability", "random-valid", "--env", KUHN, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert abs(report["exploitability"] - 0.4583) < 1e-4 and report["info_states"] == 12
    assert {"exploitability", "nash_conv", "invalid_mass", "info_states", "seconds"} <= set(report)


def test_the_cli_shows_the_extracted_policy_of_every_information_state():
    """--policy: uniform play is a half each in all 12 states of Kuhn poker; first-valid passes
    everywhere, a line per state in the text report."""
    done = cli("exploitability", "random-valid", "--env", KUHN, "--json", "--policy")
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)["policy"]
    assert len(table) == 12 and {"0", "0b", "2pb"} <= set(table)
    assert all(row == pytest.approx({"[pass]": 0.5, "[bet]": 0.5}) for row in table.values())
    assert "policy" not in json.loads(cli("exploitability", "random-valid", "--env", KUHN, "--json").stdout)
    done = cli("exploitability", "first-valid", "--env", KUHN, "--policy")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 13 and "  1pb  [pass] 1.000  [bet] 0.000" in lines


@pytest.mark.parametrize("args,message", [
    (("random-valid", "--env", KUHN, "--mixture", "uniform", "--policy"), "--policy shows one policy's table: not with --mixture"),
    (("random-valid", "--env", KUHN, "--mixture", "least"), "random-valid: not a run directory with checkpoints"),
    (("random-valid", "--env", "openspiel/liars_dice", "--mixture", "least"), "too many for the sequence-form linear program"),
    (("random-valid", "--env", "openspiel/kuhn_pokr"), "unknown OpenSpiel game 'kuhn_pokr'. Did you mean 'kuhn_poker'?"),
    (("random-valid", "--env", KUHN, "--param", "players=3"), "has 3 players; only two-player games are supported"),
    (("random-valid", "--env", KUHN, "--param", "cards=4"), "Unknown parameter 'cards'"),
    (("random-valid", "--env", "openspiel/leduc_poker", "--max-info-states", "100"), "more than max_info_states = 100"),
    (("nobody", "--env", KUHN), "unknown scripted agent 'nobody'"),
    (("cfr:x", "--env", KUHN), "cfr:N takes a positive number of iterations"),
])
def test_bad_input_is_one_line_and_exit_status_2(args, message):
    done = cli("exploitability", *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_config_check_names_the_env_and_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nopponents = ["random-valid"]\n[[train_envs]]\nenv_id = "openspiel/kuhn_poker"\nnum_players = 3\n')
    done = cli("config", "check", str(bad))
    assert done.returncode == 2 and "train_envs.0: OpenSpiel game 'kuhn_poker' is played by 2 players" in done.stderr


def test_one_tournament_mixes_textarena_and_openspiel_games(tmp_path):
    mixed = {"name": "mix", "seed": 0, "train_envs": ["KuhnPoker-v0-train", KUHN], "opponents": ["random-valid", "first-valid"],
             "model_sampler": {"name": "fixed"}, "collection": {"tournament_games": 80, "num_train_games": 16}, "trackers": []}
    done = unstable_core.run(mixed, run_dir=tmp_path / "mix")
    assert done.status == "completed" and {r.env_id for r in done.eval_records} == {"KuhnPoker-v0-train", KUHN}


def test_the_agents_play_only_legal_actions_and_the_envs_list_names_the_games():
    done = cli("envs", "list")
    assert "openspiel/kuhn_poker" in done.stdout.split() and "KuhnPoker-v0" in done.stdout.split()
    import asyncio

    from unstable_core import GenerationRequest, ModelRef
    from unstable_openspiel.agents import AgentOptions, OpenSpielAgents

    agents = OpenSpielAgents(AgentOptions())
    for seed in range(20):
        game = make("openspiel/leduc_poker")
        game.reset(num_players=2, seed=seed)
        done = False
        while not done:
            pid, obs = game.observe()
            ref = ModelRef(uid="cfr", model="cfr:20", backend="openspiel")
            text = asyncio.run(agents.generate(GenerationRequest(model=ref, prompt=obs, observation=obs,
                                                                 env_id="openspiel/leduc_poker", seed=seed)))
            done, invalid = game.step(text.text.removeprefix("\\boxed{").removesuffix("}"))
            assert not invalid


def test_a_mixtures_exploitability_is_that_of_a_player_drawing_one_policy_per_game():
    """Checked against brute force: in Kuhn poker each player has 64 pure strategies; a best
    response to a mixture drawn once per game gets sum_i w_i u(sigma, pi_i), so NashConv is the
    sum over players of the best pure strategy's value against the mixture."""
    import itertools

    from open_spiel.python import policy as policy_lib
    from open_spiel.python.algorithms.expected_game_score import policy_value

    from unstable_openspiel import games, policies
    from unstable_openspiel.agents import scripted_policy

    tables = [policies.cfr_policy(KUHN, {}, 10), scripted_policy("first-valid", KUHN, {})]
    weights = [0.3, 0.7]
    mixed = policies.mixture_policy(KUHN, {}, tables, weights)
    value, conv = policies.nash_conv(KUHN, {}, mixed)

    game = games.load(KUHN)
    root = game.new_initial_state()
    best = []
    for player in (0, 1):
        pure = policy_lib.TabularPolicy(game)
        keys = pure.states_per_player[player]
        top = -9.0
        for actions in itertools.product((0, 1), repeat=len(keys)):
            for key, action in zip(keys, actions):
                pure.policy_for_key(key)[:] = [1.0 - action, float(action)]
            got = 0.0
            for table, w in zip(tables, weights):
                seats = [pure, table] if player == 0 else [table, pure]
                got += w * policy_value(root, seats)[player]
            top = max(top, got)
        best.append(top)
    assert conv == pytest.approx(sum(best), abs=1e-9) and value == pytest.approx(sum(best) / 2, abs=1e-9)
    alone, _ = policies.nash_conv(KUHN, {}, policies.mixture_policy(KUHN, {}, tables, [1.0, 0.0]))
    assert alone == pytest.approx(policies.nash_conv(KUHN, {}, tables[0])[0], abs=1e-9)


def test_expected_payoffs_are_the_exact_chips_won_from_both_seats():
    """Hand-worked: a player that always bets (or calls) against one that always passes (or
    folds) wins the ante from either seat, +1. Against uniform it wins 1/2 as the first player
    (uniform folds half the time; a called bet is an even showdown) and 1/4 as the second (it
    bets after uniform's pass, half the time, and wins 1/2 there): 3/8. Uniform against uniform
    is even once the seats are swapped."""
    from unstable_openspiel import policies

    def always(label):
        return lambda observation, labels: {name: 1.0 if name == label else 0.0 for name in labels}

    def uniform(observation, labels):
        return {name: 1 / len(labels) for name in labels}

    assert policies.expected_payoffs(KUHN, {}, always("[bet]"), [always("[pass]"), uniform]) == pytest.approx([1.0, 0.375], abs=1e-12)
    assert policies.expected_payoffs(KUHN, {}, always("[pass]"), [always("[bet]")]) == pytest.approx([-1.0], abs=1e-12)
    assert policies.expected_payoffs(KUHN, {}, uniform, [uniform]) == pytest.approx([0.0], abs=1e-12)


def sloppy(shift):
    """A policy that leaves some mass on answers that are no legal action: by observation, an
    invalid mass of 0.15-0.55 and the rest spread unevenly over the labels."""
    def probabilities(observation, labels):
        h = sum(map(ord, observation)) + shift
        invalid = 0.15 + 0.1 * (h % 5)
        weights = [1 + (h + 3 * i) % 4 for i in range(len(labels))]
        return {name: (1 - invalid) * w / sum(weights) for name, w in zip(labels, weights)}

    return probabilities


def clean(shift):
    """``sloppy(shift)`` renormalised over the labels: no invalid mass."""
    def probabilities(observation, labels):
        probs = sloppy(shift)(observation, labels)
        return {name: p / sum(probs.values()) for name, p in probs.items()}

    return probabilities


def played_mean(row, column, allowance, games, seed=0):
    """The row's mean reward over games the env plays (half in each seat): each answer is drawn
    from the policy's probabilities, the invalid mass an unparsable answer."""
    import random

    from unstable_openspiel.env import INVALID_NOTE, OpenSpielGame

    rng = random.Random(seed)
    rewards = []
    for g in range(games):
        game = OpenSpielGame(EnvSpec(env_id=KUHN), allowance)
        game.reset(num_players=2, seed=rng.getrandbits(31))
        seats = [row, column] if g % 2 == 0 else [column, row]
        done = False
        while not done:
            player, observation = game.observe()
            probs = seats[player](observation.removeprefix(INVALID_NOTE + "\n"), game.labels)
            answer = rng.choices([*probs, "[raise the stakes]"], weights=[*probs.values(), 1 - sum(probs.values())])[0]
            done, _ = game.step(answer)
        result, _ = game.close()
        rewards.append(result[g % 2])
    return sum(rewards) / games, (sum((r - sum(rewards) / games) ** 2 for r in rewards) / (games - 1) / games) ** 0.5


@pytest.mark.parametrize("allowance", [0, 1])
def test_expected_payoffs_are_what_the_env_pays_invalid_answers_included(allowance):
    """A policy that answers invalidly 15-55 % of the time against one that never does: the exact
    payoff equals the mean reward of 20,000 games the env plays (4 standard errors) and is not the
    renormalised tables' payoff."""
    from open_spiel.python.algorithms.expected_game_score import policy_value

    from unstable_openspiel import games, policies

    row, column = sloppy(0), clean(1)
    exact = policies.expected_payoffs(KUHN, {}, row, [column], allowance=allowance)[0]
    mean, se = played_mean(row, column, allowance, games=20_000)
    assert abs(exact - mean) < 4 * se
    root = games.load(KUHN, {}).new_initial_state()
    a, b = policies.extract(KUHN, {}, row).policy, policies.extract(KUHN, {}, column).policy
    renormalised = (policy_value(root, [a, b])[0] + policy_value(root, [b, a])[1]) / 2
    assert abs(exact - renormalised) > 8 * se


def test_without_invalid_mass_the_payoff_is_openspiels_policy_value_and_always_invalid_loses():
    """Kuhn and Leduc: the tables' own value where nothing is invalid; a player whose answers are
    never legal loses the game at its first turn, whatever the allowance."""
    from open_spiel.python.algorithms.expected_game_score import policy_value

    from unstable_openspiel import games, policies

    for name in ("kuhn_poker", "leduc_poker"):
        env = f"openspiel/{name}"
        root = games.load(env, {}).new_initial_state()
        a, b = policies.extract(env, {}, clean(0)), policies.extract(env, {}, clean(1))
        assert max(a.invalid_mass.values()) < 1e-12
        for seats in ([a, b], [b, a]):
            assert policies.played_value(root, seats) == pytest.approx(policy_value(root, [s.policy for s in seats]), abs=1e-12)

    def never(observation, labels):
        return {name: 0.0 for name in labels}

    for allowance in (0, 2):
        assert policies.expected_payoffs(KUHN, {}, never, [clean(0)], allowance=allowance) == pytest.approx([-1.0], abs=1e-12)
