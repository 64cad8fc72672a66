"""``collection.answers = "choice"``: the game runner offers a backend that declares
``answers_choices`` the legal actions' answers (``request.choices``), only that backend, and the
config check refuses the mode, one line a problem, where the env or the trained backend cannot
take part in it."""

from __future__ import annotations

import asyncio
import math

import pytest

import unstable_core
from unstable_core import Completion, ConfigError, EnvSpec, GameSpec, GenerationRequest, LegalActions, ModelRef
from unstable_core.runtime.game.envcalls import EnvCalls
from unstable_core.runtime.game.runner import GameRunner
from unstable_core.testing import PickBestGame, ToyProvider, toy_config, toy_plugin


class LabelledGame(PickBestGame):
    def legal_actions(self) -> list[str]:
        return [f"[{a}]" for a in self.actions]


class LabelledProvider(ToyProvider):
    def make(self, env):
        return LabelledGame(**env.kwargs)


class Recorder:
    """Answers the last choice offered, or an answer no env accepts when none are."""

    tokenizer = None

    def __init__(self) -> None:
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> Completion:
        self.requests.append(request)
        return Completion(text=request.choices[-1] if request.choices else "\\boxed{Z}")


@pytest.mark.parametrize("env_calls", ["loop", "threads"])
def test_only_a_choosing_backends_requests_carry_the_legal_answers(env_calls):
    chooser, free = Recorder(), Recorder()
    backends = {"chooser": chooser, "free": free}
    calls = EnvCalls(env_calls)
    template = unstable_core.build_component("template", "default")
    runner = GameRunner(LabelledProvider(), lambda n: template, backends.__getitem__, env_calls=calls,
                        offers_choices=lambda name: name == "chooser")
    seats = [ModelRef(uid="a", backend="chooser", model="m"), ModelRef(uid="b", backend="free", model="m")]
    spec = GameSpec(game_idx=0, seed=1, env=EnvSpec(env_id="PickBest-v0", kwargs={"actions": ["A", "B", "C"]}), seats=seats)

    async def play():
        try:
            return await runner.play(spec)
        finally:
            calls.close()

    result = asyncio.run(play())
    assert [r.choices for r in chooser.requests] == [["\\boxed{[A]}", "\\boxed{[B]}", "\\boxed{[C]}"]]
    assert [r.choices for r in free.requests] == [None]
    first, second = (t.turns[0] for t in result.trajectories)
    assert (first.action, first.invalid) == ("[C]", False)  # one of the offered answers, which the env accepts
    assert second.invalid and result.rewards == {0: 1.0, 1: -1.0}  # the free seat answered what it liked
    assert isinstance(LabelledGame(), LegalActions) and not isinstance(PickBestGame(), LegalActions)


def test_the_config_check_names_the_env_and_the_backend_that_cannot_choose(tmp_path):
    system = unstable_core.load_plugins(entry_points=False, extra=[("toy", toy_plugin)])
    with pytest.raises(ConfigError) as caught:
        unstable_core.build(toy_config(collection={"answers": "choice"}), run_dir=tmp_path / "r", plugins=system)
    text = str(caught.value)
    assert ('collection.answers = "choice" needs the legal actions of PickBest-v0: env provider \'toy\' offers none' in text)
    assert "inference 'tabular' cannot answer one of the given choices (answers_choices; hf can)" in text
    with pytest.raises(ConfigError, match="collection.answers"):
        unstable_core.build(toy_config(collection={"answers": "menu"}), run_dir=tmp_path / "r2", plugins=system)


def choice_step(reward: float, chosen: int, choices: list[list[int]], probabilities: list[float]):
    from unstable_core import Step, Turn

    turn = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=[7, 8], completion="c",
                completion_token_ids=choices[chosen], logprobs=[-0.1 * (i + 1) for i in range(len(choices[chosen]))],
                action="[a]", format_ok=True, choice_token_ids=choices, choice_probabilities=probabilities)
    return Step(env_id="E", game_idx=0, player_id=0, turn_index=0, num_turns=1, turn=turn, final_reward=reward, reward=reward)


def log_softmax(z, i):
    """log p(i) for logits z, over the three tokens bet, pass, junk."""
    return z[i] - math.log(sum(math.exp(v) for v in z))


def log_legal_mass(z):
    """log (p(bet) + p(pass))."""
    return math.log(math.exp(log_softmax(z, 0)) + math.exp(log_softmax(z, 1)))


def log_pi(z, i):
    """log of p renormalised over bet and pass."""
    return log_softmax(z, i) - log_legal_mass(z)


def grad(f, z):
    """Central finite differences of f at z."""
    h = 1e-6
    return [(f([v + h * (j == k) for j, v in enumerate(z)]) - f([v - h * (j == k) for j, v in enumerate(z)])) / (2 * h)
            for k in range(len(z))]


def test_a_step_answered_among_choices_becomes_a_row_per_choice_worked_by_hand():
    """Advantage 2, chosen 'bet' (probability 0.25) of 'bet' / 'pass', which share two leading
    tokens and end alike: each row trains its deciding token only, the shared ones move to the
    prompt; advantages 2 * (1 - 0.25) and 2 * (0 - 0.75), times rows / steps = 3 / 2 with the
    plain step beside them."""
    from unstable_core import expand_choices

    bet, pass_ = [1, 2, 3, 9], [1, 2, 4, 9]
    plain = choice_step(1.0, 0, [[5, 9]], [1.0]).model_copy(deep=True)
    plain.turn.choice_token_ids, plain.turn.choice_probabilities = [], []
    rows = expand_choices([choice_step(2.0, 0, [bet, pass_], [0.25, 0.75]), plain])
    assert [r.turn.prompt_token_ids for r in rows] == [[7, 8, 1, 2], [7, 8, 1, 2], [7, 8]]
    assert [r.turn.completion_token_ids for r in rows] == [[3], [4], [5, 9]]
    assert [r.turn.logprobs for r in rows] == [pytest.approx([-0.3]), [], pytest.approx([-0.1, -0.2])]
    assert [r.reward for r in rows] == pytest.approx([2.25, -2.25, 1.5])
    assert expand_choices([plain]) == [plain]  # nothing answered among choices: the batch as it was


def test_the_rows_step_is_the_gradient_of_the_renormalised_policy():
    """One decision position, logits over {bet, pass, junk}; the played policy is p renormalised
    over {bet, pass}. Sum over the rows of advantage * d log p(row's token) / d logits equals
    A * d log pi(chosen) / d logits (finite differences), for either choice; the chosen answer's
    own gradient alone does not (it moves junk's share too)."""
    from unstable_core import expand_choices

    logits = [0.3, -0.4, 1.1]
    vocab = {3: 0, 4: 1}

    pi = [math.exp(log_pi(logits, i)) for i in (0, 1)]
    for chosen in (0, 1):
        rows = expand_choices([choice_step(1.7, chosen, [[1, 3, 9], [1, 4, 9]], pi)])
        scale = len(rows)  # rows / steps, which the learner's mean over rows divides out again
        step = [0.0, 0.0, 0.0]
        for row in rows:
            (token,) = row.turn.completion_token_ids
            g = grad(lambda z, i=vocab[token]: log_softmax(z, i), logits)
            step = [s + row.reward / scale * gi for s, gi in zip(step, g)]
        want = [1.7 * g for g in grad(lambda z: log_pi(z, chosen), logits)]
        assert step == pytest.approx(want, abs=1e-6)
        alone = [1.7 * g for g in grad(lambda z: log_softmax(z, chosen), logits)]
        assert alone != pytest.approx(want, abs=1e-3)


def test_choice_mass_adds_the_gradient_of_the_offered_answers_total_log_probability():
    """With ``mass`` the rows' step is A * d log pi(chosen) + mass * d log (p(bet) + p(pass)) by
    finite differences; the second term raises both answers' logits against junk's and leaves
    pi as it is (its step along bet - pass is zero)."""
    from unstable_core import expand_choices

    logits = [0.3, -0.4, 1.1]

    pi = [math.exp(log_pi(logits, i)) for i in (0, 1)]
    rows = expand_choices([choice_step(-0.9, 1, [[1, 3, 9], [1, 4, 9]], pi)], mass=0.4)
    step = [0.0, 0.0, 0.0]
    for row in rows:
        (token,) = row.turn.completion_token_ids
        g = grad(lambda z, i=token - 3: log_softmax(z, i), logits)
        step = [s + row.reward / len(rows) * gi for s, gi in zip(step, g)]
    policy, total = grad(lambda z: log_pi(z, 1), logits), grad(log_legal_mass, logits)
    assert step == pytest.approx([-0.9 * a + 0.4 * b for a, b in zip(policy, total)], abs=1e-6)
    mass_only = expand_choices([choice_step(0.0, 1, [[1, 3, 9], [1, 4, 9]], pi)], mass=0.4)
    assert [r.reward for r in mass_only] == pytest.approx([0.4 * pi[0] * 2, 0.4 * pi[1] * 2])
    assert total[2] < 0 < total[0] and total[1] > 0


@pytest.mark.parametrize("mass", [0.0, 0.3])
def test_the_buffer_role_expands_drawn_choice_steps_with_the_configured_mass(make_plugin_system, tmp_path, mass):
    """``collection.choice_mass`` reaches the rows the buffer role's draw makes: a zero-advantage
    step answered among two choices (pi 0.25 / 0.75) draws as two rows of advantage
    2 * mass * pi (the rows / steps scale), and as two zero rows without it."""
    from unstable_core.executors import build_role

    system = make_plugin_system(toy_plugin)
    cfg = toy_config(buffer={"name": "episode", "capacity": 16}, collection={"choice_mass": mass},
                     training={"filter_zero_advantage": False})
    role = build_role("buffer", unstable_core.build(cfg, run_dir=tmp_path / "r", plugins=system).plan, system)
    role.buffer.add([[choice_step(0.0, 0, [[1, 3, 9], [1, 4, 9]], [0.25, 0.75])]])
    batch = asyncio.run(role.draw(1, learner_version=0))
    assert [r.reward for r in batch.steps] == pytest.approx([2 * mass * 0.25, 2 * mass * 0.75])


@pytest.fixture(scope="module")
def reinforce_learner(tmp_path_factory):
    """A float64 REINFORCE learner with importance sampling on the fast tiny model, its LoRA
    weights randomised (so that the adapter moves the policy)."""
    torch = pytest.importorskip("torch")
    from unstable_hf.testing import build_fast_tiny
    from unstable_reinforce.learner import ReinforceLearner
    from unstable_reinforce.options import ReinforceOptions

    path = build_fast_tiny(tmp_path_factory.mktemp("tiny-cache"))
    opts = ReinforceOptions(device="cpu", dtype="float64", lora={"rank": 4, "alpha": 8}, importance_sampling=True,
                            is_cap=10.0, max_generation_len=6)
    learner = ReinforceLearner(opts, path, seed=0)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in learner.model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)
    return learner


def full_logprob(learner, prompt, answer):
    """log p(answer | prompt) from the ordinary forward's full logits (float64)."""
    import torch

    ids = torch.tensor([prompt + answer])
    logp = torch.log_softmax(learner.model(input_ids=ids).logits[0].double(), -1)
    return sum(logp[len(prompt) - 1 + j, t] for j, t in enumerate(answer))


def close(a, b):
    """a equals b to 1e-6 of b's largest entry: transformers' Qwen3RMSNorm computes in float32
    even in a float64 model, so gradients reached through outputs scaled apart agree to about 1e-7
    of their size, no closer."""
    assert float((a - b).abs().max()) <= 1e-6 * float(b.abs().max())


@pytest.mark.parametrize(("cap", "size"), [(10.0, 1), (1.2, 8)])  # size 8: the answers scored prefix-shared, in one chunk
def test_importance_sampling_weighs_every_row_of_a_choice_step_by_the_chosen_answer_s_ratio(reinforce_learner, cap, size):
    """With importance sampling, a step answered among choices is corrected by pi(c) / pi_old(c),
    pi the model's probability renormalised over the whole offered answers (as the backend drew
    it; pi_old the backend's ``choice_probabilities``), truncated at ``is_cap``, on every row of
    the step: the rows' gradient is rho times the uncorrected one of rows drawn with the model's own
    probabilities (the rows' step is A * grad log pi(c) by the tests above, so the step is
    rho * A * grad log pi(c)). rho by hand
    from full logits; the rows each in a chunk of their own, beside a plain step whose tokens keep
    their own ratios. Answered with the probabilities the model gives, rho is 1."""
    import torch

    from unstable_core import Step, Turn, expand_choices

    learner = reinforce_learner
    learner.options = learner.options.model_copy(update={"is_cap": cap, "importance_sampling": True, "mini_batch_size": size})
    prompt, choices, chosen = [5, 6, 7], [[21, 30, 41, 2], [21, 31, 2], [21, 30, 44, 2]], 2
    with torch.no_grad():
        logq = torch.stack([full_logprob(learner, prompt, c) for c in choices])
        pi = torch.softmax(logq, 0).tolist()
        chosen_logprobs = [float(full_logprob(learner, prompt + choices[chosen][:j], [t]))
                           for j, t in enumerate(choices[chosen])]
    # the backend drew the chosen answer with 1 / 1.6 of the probability the model now gives it
    rest = (1 - pi[chosen] / 1.6) / (1 - pi[chosen])
    pi_old = [p / 1.6 if i == chosen else p * rest for i, p in enumerate(pi)]

    def decision(probabilities, game):
        turn = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=prompt, completion="c",
                    completion_token_ids=choices[chosen], logprobs=chosen_logprobs, action="[a]", format_ok=True,
                    choice_token_ids=choices, choice_probabilities=probabilities)
        return Step(env_id="E", game_idx=game, player_id=0, turn_index=0, num_turns=1, turn=turn, final_reward=1.3,
                    reward=1.3)

    plain_turn = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=[8, 9], completion="c",
                      completion_token_ids=[12, 2], logprobs=[-9.0, -0.5], action="[a]", format_ok=True)
    plain = Step(env_id="E", game_idx=9, player_id=0, turn_index=0, num_turns=1, turn=plain_turn, final_reward=-0.7,
                 reward=-0.7)

    def gradient(rows, importance_sampling):
        """The update's first-pass gradient, one chunk a row, and its weights' statistics."""
        learner.options = learner.options.model_copy(update={"importance_sampling": importance_sampling})
        learner.prepare_batch(rows)
        total, stats = [torch.zeros_like(p) for p in learner.params], []
        for index, row in enumerate(rows):
            learner.chunk_index = index
            loss, s = learner.loss([row], batch_size=len(rows))
            total = [t + g for t, g in zip(total, torch.autograd.grad(loss, learner.params))]
            stats.append(s)
        learner.chunk_index = 0
        return total, stats

    rows = expand_choices([decision(pi_old, 0)])
    assert len(rows) == 3 and [bool(r.turn.logprobs) for r in rows] == [False, False, True]
    rho = min(pi[chosen] / pi_old[chosen], cap)
    corrected, stats = gradient(rows + [plain], True)
    # the rows' step with the baseline of the policy at the update's start (the model's pi), which
    # the learner re-forms the drawn rows' advantages with
    uncorrected, _ = gradient(expand_choices([decision(pi, 0)]), False)
    alone, _ = gradient([plain], True)  # the plain step's own part, its tokens' ratios
    for c, u, a in zip(corrected, uncorrected, alone):
        close(c, rho * u * 3 / 4 + a / 4)  # a batch of 4 rows, of 3 and of 1
    assert [s["is_ratio_mean"] for s in stats[:3]] == pytest.approx([pi[chosen] / pi_old[chosen]] * 3, rel=1e-6)
    assert any(float(u.abs().sum()) > 0 for u in uncorrected)

    on_policy = expand_choices([decision(pi, 1)])  # drawn with the model's own probabilities: no correction
    same, _ = gradient(on_policy, True)
    plain_rows, _ = gradient(on_policy, False)
    for c, u in zip(same, plain_rows):
        close(c, u)


def policy_gradient_rows(learner, rows):
    """The gradient of the learner's loss over ``rows`` (one batch, each row a chunk of its own),
    ``prepare_batch`` first, as an update's first pass computes it."""
    import torch

    learner.prepare_batch(rows)
    total = [torch.zeros_like(p) for p in learner.params]
    for index, row in enumerate(rows):
        learner.chunk_index = index
        loss, _ = learner.loss([row], batch_size=len(rows))
        total = [t + g for t, g in zip(total, torch.autograd.grad(loss, learner.params))]
    learner.chunk_index = 0
    return total


def drawn_decision(prompt, choices, chosen, probabilities, game, reward, learner):
    """A step answered among ``choices`` with ``chosen`` drawn at ``probabilities``; its rollout
    logprobs the model's own (so that only the choice's ratio moves the weights)."""
    import torch

    from unstable_core import Step, Turn

    with torch.no_grad():
        logprobs = [float(full_logprob(learner, prompt + choices[chosen][:j], [t])) for j, t in enumerate(choices[chosen])]
    turn = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=prompt, completion="c",
                completion_token_ids=choices[chosen], logprobs=logprobs, action="[a]", format_ok=True,
                choice_token_ids=choices, choice_probabilities=probabilities)
    return Step(env_id="E", game_idx=game, player_id=0, turn_index=0, num_turns=1, turn=turn, final_reward=reward,
                reward=reward)


@pytest.mark.parametrize("mass", [0.0, 0.4])
def test_off_policy_choice_rows_take_rho_times_the_renormalised_policy_s_gradient(reinforce_learner, mass):
    """Drawn with pi_old far from the model's pi, the rows of a decision with importance sampling
    take rho * (A * grad log pi(c) + mass * grad log sum_a p(a)) / max_generation_len, rho = pi(c) / pi_old(c)
    (p(a) at the deciding position: the answers' shared first token is the rows' prompt), against
    autograd of that expression from full float64 logits: the rows' baseline is re-formed with pi
    at the update's start (with pi_old's it is A * (grad log p(c) - sum_a pi_old(a) grad log p(a)))."""
    import torch

    from unstable_core import expand_choices

    learner = reinforce_learner
    learner.options = learner.options.model_copy(update={"is_cap": 10.0, "importance_sampling": True, "mini_batch_size": 8})
    prompt, choices, chosen, A = [5, 6, 7], [[21, 30], [21, 31], [21, 34]], 2, 1.3  # each row: its deciding token
    logq = torch.stack([full_logprob(learner, prompt, c) for c in choices])
    with torch.no_grad():
        pi = torch.softmax(logq, 0).tolist()
    pi_old = [0.6, 0.25, 0.15]
    rho = pi[chosen] / pi_old[chosen]
    # the offered answers' total, at the deciding position: the shared [21] is the rows' prompt, never trained
    total = torch.logsumexp(logq, 0) - full_logprob(learner, prompt, [21])
    objective = rho * (A * torch.log_softmax(logq, 0)[chosen] + mass * total)
    want = torch.autograd.grad(objective, learner.params, allow_unused=True)
    rows = expand_choices([drawn_decision(prompt, choices, chosen, pi_old, 0, A, learner)], mass)
    got = policy_gradient_rows(learner, rows)
    assert max(float(w.abs().max()) for w in want if w is not None) > 1e-4
    norm = learner.options.max_generation_len  # normalizer = "max_generation_len": each row's logprob / 6
    for g, w in zip(got, want):
        close(-g * norm, torch.zeros_like(g) if w is None else w)  # the loss is minus the objective


def test_off_policy_choice_rows_cancel_where_every_answer_loses_alike(reinforce_learner):
    """The review's counterexample: two answers drawn at (0.5, 0.5), the model now elsewhere, each
    drawn once with advantage -1. The true expected step E_pi_old[rho * A * grad log pi(c)] =
    A * sum_c pi(c) grad log pi(c) is 0; the two decisions' importance-weighted rows sum to 0 (with
    pi_old's baseline they gave a nonzero step)."""
    import torch

    from unstable_core import expand_choices

    learner = reinforce_learner
    learner.options = learner.options.model_copy(update={"is_cap": 10.0, "importance_sampling": True, "mini_batch_size": 8})
    prompt, choices = [5, 6, 7], [[21, 30], [21, 31]]
    with torch.no_grad():
        pi = torch.softmax(torch.stack([full_logprob(learner, prompt, c) for c in choices]), 0).tolist()
    assert abs(pi[0] - 0.5) > 0.01  # the policy moved since the draw
    steps = [drawn_decision(prompt, choices, c, [0.5, 0.5], c, -1.0, learner) for c in range(2)]
    got = policy_gradient_rows(learner, expand_choices(steps))
    one = policy_gradient_rows(learner, expand_choices(steps[:1]))  # one decision alone does move the weights
    scale = max(float(g.abs().max()) for g in one)
    assert scale > 1e-4
    assert max(float(g.abs().max()) for g in got) <= 1e-9 * scale + 1e-12


def test_prepare_runs_without_lora_dropout(tmp_path_factory):
    """With lora.dropout = 0.5 and the model in training mode (as an update's passes run it), two
    ``prepare_batch`` calls on one batch give the same per-step values (the choice ratios, of the
    policy's own probabilities), and the model is back in training mode after each."""
    torch = pytest.importorskip("torch")
    from unstable_core import expand_choices
    from unstable_hf.testing import build_fast_tiny
    from unstable_reinforce.learner import ReinforceLearner
    from unstable_reinforce.options import ReinforceOptions

    path = build_fast_tiny(tmp_path_factory.mktemp("tiny-dropout"))
    opts = ReinforceOptions(device="cpu", dtype="float64", lora={"rank": 4, "alpha": 8, "dropout": 0.5},
                            importance_sampling=True, is_cap=10.0, max_generation_len=6)
    learner = ReinforceLearner(opts, path, seed=0)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in learner.model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    rows = expand_choices([drawn_decision([5, 6, 7], [[21, 30], [21, 31], [21, 34]], 1, [0.3, 0.3, 0.4], 0, 1.0, learner)])
    learner.model.train()
    seen = []
    for _ in range(2):
        learner.prepare_batch(rows)
        seen.append(learner.prepared.of(rows, "choice_ratio"))
        assert learner.model.training
    assert seen[0] == seen[1]
    learner.model.eval()
    learner.prepare_batch(rows)
    assert learner.prepared.of(rows, "choice_ratio") == seen[0]  # and they are the eval-mode policy's
