import pytest
import torch

import unstable_kl_reinforce.plugin as plugin
from unstable_core import Batch, ModelRef, build_component, load_plugins
from unstable_core.testing import make_steps
from unstable_hf.testing import LoraLearnerContract

torch.set_num_threads(1)


class TestKLReinforceContract(LoraLearnerContract):
    plugin = plugin
    name = "kl-reinforce"
    options = {**LoraLearnerContract.options, "kl_coef": 0.5}


@pytest.fixture
def learner(tmp_path_factory):
    def make(**options):
        from unstable_hf.testing import build_fast_tiny

        path = build_fast_tiny(tmp_path_factory.getbasetemp() / "unstable-hf-fast-tiny")
        system = load_plugins(entry_points=False, extra=[("kl-reinforce", plugin)], strict=True)
        opts = {"device": "cpu", "lora": {"rank": 4, "alpha": 8}, **options}
        return build_component("learner", "kl-reinforce", opts, plugins=system, model=ModelRef(uid="base", kind="base", model=path))

    return make


@pytest.mark.parametrize("layout", ["masks", "segments"])  # the reference logprobs in either prefix-shared layout
def test_the_kl_starts_at_zero_and_is_positive_once_the_policy_moved(learner, layout):
    import random

    L = learner(lr=5e-2, kl_coef=0.0, prefix_layout=layout, mini_batch_size=12)
    steps = [s.model_copy(update={"turn": s.turn.model_copy(update={"prompt_token_ids": [7, 8, 9, 10] + s.turn.prompt_token_ids})})
             for s in make_steps(random.Random(0), (3, 300))]  # every prompt starts alike: something to share
    batch = Batch(steps=steps, learner_version=0)
    first = L.update(batch)
    assert first["prefix_share"] > 0 and first["prefix_segments"] == (layout == "segments")
    assert first["kl"] == 0.0  # a fresh adapter (LoRA B = 0) is the base policy
    kls = [L.update(batch)["kl"] for _ in range(3)]
    assert all(kl > 1e-4 for kl in kls), kls


@pytest.mark.parametrize("estimator", ["k3", "k1-score"])
def test_the_penalty_pulls_the_policy_back_to_the_base(learner, estimator):
    """With zero rewards only the KL term has a gradient: updates shrink the KL they report (the
    first few still move away, on the optimizer's momentum from the rewarded updates)."""
    import random

    L = learner(lr=5e-2, kl_coef=1.0, kl_estimator=estimator)
    moving = Batch(steps=make_steps(random.Random(0), (3, 300)), learner_version=0)
    for _ in range(4):
        L.update(moving)
    still = Batch(steps=[s.model_copy(update={"reward": 0.0}) for s in moving.steps], learner_version=4)
    kls = [L.update(still)["kl"] for _ in range(14)]
    assert max(kls[-3:]) < 0.5 * max(kls[:3]), kls


def test_a_learner_without_a_model_is_refused_with_a_clear_message():
    from unstable_core import UnstableError

    system = load_plugins(entry_points=False, extra=[("kl-reinforce", plugin)], strict=True)
    with pytest.raises(UnstableError, match=r"kl-reinforce learner needs \[model\] model"):
        build_component("learner", "kl-reinforce", {}, plugins=system)


def two_token_case():
    """A policy over two-token sequences (3 tokens each position, the second's logits depend on the
    first) and a fixed reference, as float64 logits; every sequence, in one flat batch of rows."""
    g = torch.Generator().manual_seed(3)
    theta = torch.randn(1 + 3, 3, generator=g, dtype=torch.float64, requires_grad=True)  # row 0: first token; 1 + y1: second
    ref_logits = torch.randn(1 + 3, 3, generator=g, dtype=torch.float64)
    seqs = [(a, b) for a in range(3) for b in range(3)]
    return theta, ref_logits, seqs


def seq_logprobs(logits, seq):
    """Each token's log-probability of ``seq`` under ``logits`` [2]."""
    a, b = seq
    return torch.stack([torch.log_softmax(logits[0], -1)[a], torch.log_softmax(logits[1 + a], -1)[b]])


@pytest.mark.parametrize("estimator", ["k3", "k1-score"])
def test_each_kl_estimator_s_expected_gradient_is_the_exact_gradient_it_names(estimator):
    """E_{y ~ pi}[grad of the penalty term] over every two-token sequence, weighted by its
    probability, against autograd of the exact KL of the two sequence distributions: `k1-score`
    gives the gradient of KL(pi || ref); `k3` (GRPO's) that of KL(ref || pi) taken per token at the
    visited prefix, which is neither KL(pi || ref)'s gradient nor KL(ref || pi)'s over sequences."""
    from unstable_kl_reinforce.learner import kl_penalty

    theta, ref_logits, seqs = two_token_case()
    logp = torch.cat([seq_logprobs(theta, s) for s in seqs])
    ref = torch.cat([seq_logprobs(ref_logits, s) for s in seqs])
    rows = torch.arange(len(seqs)).repeat_interleave(2)
    per_token = kl_penalty(logp, ref, rows, estimator)
    with torch.no_grad():
        pi = torch.stack([seq_logprobs(theta, s).sum().exp() for s in seqs])
    per_seq = torch.zeros(len(seqs), dtype=torch.float64).index_add(0, rows, per_token)
    (expected,) = torch.autograd.grad((pi * per_seq).sum(), theta)  # sum_y pi(y) grad penalty(y)

    def kl(p_logits, q_logits):
        logp_seq = torch.stack([seq_logprobs(p_logits, s).sum() for s in seqs])
        logq_seq = torch.stack([seq_logprobs(q_logits, s).sum() for s in seqs])
        return (logp_seq.exp() * (logp_seq - logq_seq)).sum()

    (reverse,) = torch.autograd.grad(kl(theta, ref_logits), theta)  # KL(pi || ref)
    (forward,) = torch.autograd.grad(kl(ref_logits, theta), theta)  # KL(ref || pi)
    # KL(ref || pi) of each next-token distribution, at every prefix weighted by how often pi visits it
    with torch.no_grad():
        visits = [1.0] + torch.softmax(theta[0], -1).tolist()  # the empty prefix; then first token a
    local = sum(v * (torch.softmax(ref_logits[i], -1) * (torch.log_softmax(ref_logits[i], -1)
                                                          - torch.log_softmax(theta[i], -1))).sum()
                for i, v in enumerate(visits))
    (per_token_forward,) = torch.autograd.grad(local, theta)
    if estimator == "k1-score":
        assert torch.allclose(expected, reverse, atol=1e-12)
    else:
        assert torch.allclose(expected, per_token_forward, atol=1e-12)
        assert not torch.allclose(expected, reverse, atol=1e-3) and not torch.allclose(expected, forward, atol=1e-3)


def test_k1_score_with_per_completion_normalisation_is_refused_in_one_line_at_config_check(tmp_path, capsys, monkeypatch):
    """k1-score's reward-to-go form is the gradient of KL(pi || ref) only when every token is divided
    by one constant; ``normalizer = "tokens"`` (1 / |y| per completion) is refused by the learner's
    check_run, one line naming both keys, and ``unstable config check`` exits 2 with it; the constant
    normaliser and k3 with per-token normalisation pass."""
    import os

    from unstable_core import ChosenComponents
    from unstable_kl_reinforce.options import KLReinforceOptions

    spec = plugin.unstable_learners()[0]
    for fine in ({"kl_estimator": "k1-score"}, {"kl_estimator": "k3", "normalizer": "tokens"}):
        spec.check_run(KLReinforceOptions(**fine), ChosenComponents({}))
    with pytest.raises(ValueError) as refused:
        spec.check_run(KLReinforceOptions(kl_estimator="k1-score", normalizer="tokens"), ChosenComponents({}))
    line = str(refused.value)
    assert "\n" not in line and line.startswith('kl_estimator = "k1-score" with normalizer = "tokens"'), line
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "kuhn-tiny.toml")
    sets = ["learner.name=kl-reinforce", "learner.kl_estimator=k1-score", "learner.normalizer=tokens"]
    from unstable_core.cli import main

    monkeypatch.setenv("NO_COLOR", "1")
    with pytest.raises(SystemExit) as exited:
        main(["config", "check", str(example), *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err, err
    assert 'learner: kl_estimator = "k1-score" with normalizer = "tokens"' in err, err
