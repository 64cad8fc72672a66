"""The A2C learner: its targets, a critic that reads the state, learning, and what it serves."""

import asyncio
import random

import pytest
import torch

from unstable_a2c.learner import A2CLearner
from unstable_a2c.options import A2COptions
from unstable_core import Batch, Checkpoint, GenerationRequest, ModelRef, Step, Turn
from unstable_hf.training import Sequence, pack

torch.set_num_threads(1)
LORA = {"rank": 4, "alpha": 8}


def learner(tiny_path, **kw):
    return A2CLearner(A2COptions(**{"device": "cpu", "lora": LORA, "max_generation_len": 2, **kw}), tiny_path, seed=0)



def step(game, player, t, n, prompt, completion, final, reward=None):
    turn = Turn(player_id=player, observation="o", prompt="p", prompt_token_ids=prompt, completion="c",
                completion_token_ids=completion, action="[x]", format_ok=True)
    return Step(env_id="E", game_idx=game, player_id=player, turn_index=t, num_turns=n, turn=turn, final_reward=final,
                reward=final if reward is None else reward)


def targets(L, steps):
    """(advantage, return, value) by (game, seat, turn), as ``loss`` reads them."""
    L.prepare_batch(steps)
    columns = [L.prepared.of(steps, name) for name in ("advantage", "return", "value")]
    return {(s.game_idx, s.player_id, s.turn_index): row for s, *row in zip(steps, *columns)}


def test_prepare_runs_gae_over_each_players_own_turns(tiny_path):
    """Two players' turns interleaved in one batch (as a game plays them), V(s) fixed by hand: the
    targets are GAE over each player's turns alone, the final reward at their last turn only."""
    L = learner(tiny_path, gamma=0.9, gae_lambda=0.8, normalize_advantages=False, mini_batch_size=16)
    steps = [step(0, 0, 0, 2, [5, 6], [7], 1.0), step(0, 1, 0, 2, [5, 8], [7], -1.0),
             step(0, 0, 1, 2, [5, 9], [7], 1.0, reward=0.5), step(0, 1, 1, 2, [5, 10], [7], -1.0)]
    values = {0: 0.5, 1: -0.2, 2: 0.3, 3: 0.1}
    L.critic.values = lambda packed: torch.tensor([values[i] for i in range(len(packed.last_prompt_index))])
    stats = L.prepare_batch(steps)
    got = targets(L, steps)
    # player 0: rewards [0, 1 - 0.5] (a step penalty of -0.5 at its last turn), V [0.5, 0.3]
    a1 = 0.5 - 0.3
    a0 = 0.9 * 0.3 - 0.5 + 0.72 * a1
    # player 1: rewards [0, -1], V [-0.2, 0.1]
    b1 = -1.0 - 0.1
    b0 = 0.9 * 0.1 + 0.2 + 0.72 * b1
    expect = {(0, 0, 0): (a0, a0 + 0.5), (0, 0, 1): (a1, a1 + 0.3), (0, 1, 0): (b0, b0 - 0.2), (0, 1, 1): (b1, b1 + 0.1)}
    for key, (adv, ret) in expect.items():
        assert got[key][:2] == pytest.approx((adv, ret), abs=1e-6)
    assert stats["value_mean"] == pytest.approx(0.175)


def test_advantages_are_z_scored_over_the_batch_and_returns_are_not(tiny_path):
    L = learner(tiny_path, mini_batch_size=16)
    steps = [step(g, 0, 0, 1, [5, 6 + g], [7], r) for g, r in enumerate([1.0, -1.0, 0.0, 1.0])]
    got = targets(L, steps)
    adv = [got[(g, 0, 0)][0] for g in range(4)]
    assert sum(adv) == pytest.approx(0, abs=1e-6) and sum(a * a for a in adv) / 4 == pytest.approx(1, abs=1e-4)
    assert [got[(g, 0, 0)][1] for g in range(4)] == pytest.approx([1.0, -1.0, 0.0, 1.0])  # V = 0 at the start


def test_negative_advantages_are_scaled_for_the_policy_only(tiny_path):
    steps = [step(g, 0, 0, 1, [5, 6 + g], [7], r) for g, r in enumerate([1.0, -1.0, 0.0, 1.0])]
    full, half = learner(tiny_path, mini_batch_size=16), learner(tiny_path, mini_batch_size=16, negative_advantage_scale=0.5)
    full_targets, half_targets = targets(full, steps), targets(half, steps)
    for g in range(4):
        a, r, v = full_targets[(g, 0, 0)]
        assert half_targets[(g, 0, 0)] == pytest.approx((a * 0.5 if a < 0 else a, r, v))  # returns, values: as they were
    assert sum(full_targets[(g, 0, 0)][0] < 0 for g in range(4)) == 2


def train_critic(L, rounds=20):
    """Single-turn games whose outcome depends only on the last prompt token: 10 wins, 20 loses."""
    won, lost = [5, 6, 7, 8, 10], [5, 6, 7, 8, 20]
    game = 0
    for update in range(rounds):
        steps = []
        for _ in range(4):
            steps += [step(game, 0, 0, 1, won, [30, 31], 1.0), step(game + 1, 0, 0, 1, lost, [30, 31], -1.0)]
            game += 2
        L.update(Batch(steps=steps, learner_version=update))
    with torch.no_grad():
        v = L.critic.values(pack([Sequence(won, [30], []), Sequence(lost, [30], [])]))
    return float(v[0]), float(v[1])


def test_the_critic_learns_a_value_that_depends_on_the_state(tiny_path):
    """V(won) -> +1 and V(lost) -> -1. A critic reading position 0 (UnstableBaselines') sees the
    same first token in both states under causal attention and cannot tell them apart."""
    v_won, v_lost = train_critic(learner(tiny_path, lr=1e-6, critic_lr=1e-2))
    assert v_won > 0.6 and v_lost < -0.6, (v_won, v_lost)

    class PositionZero(A2CLearner):
        def build_modules(self):
            super().build_modules()
            values = self.critic.values

            def at_position_zero(packed):  # each step's first token: its row's start
                width = packed.ids.shape[1]
                packed.last_prompt_index = packed.last_prompt_index - packed.last_prompt_index % width
                return values(packed)

            self.critic.values = at_position_zero

    at_zero = PositionZero(A2COptions(device="cpu", lora=LORA, lr=1e-6, critic_lr=1e-2), tiny_path, seed=0)
    v_won, v_lost = train_critic(at_zero)
    assert abs(v_won - v_lost) < 1e-6


def test_a2c_learns_the_one_step_letter_game(tiny_path):
    """Reward 1 for 'C', 0 otherwise (no baseline subtracted: the critic is the baseline):
    p('C') among the four letters rises from about chance to at least 0.9."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    prompt = tok("Pick the best letter: A, B, C or D.", add_special_tokens=False)["input_ids"]
    answers = [tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for a in "ABCD"]
    L = learner(tiny_path, lr=3e-3, critic_lr=1e-2, lora={"rank": 8, "alpha": 16}, critic_lora=LORA, mini_batch_size=16)

    def probs():
        with torch.no_grad():
            packed = pack([Sequence(prompt, a, []) for a in answers])
            return torch.softmax(packed.per_step(L.policy.completion_logprobs(packed)), 0)

    assert float(probs()[2]) < 0.5
    rng = random.Random(0)
    for update in range(150):
        picks = rng.choices(range(4), weights=probs().tolist(), k=16)
        steps = [step(16 * update + i, 0, 0, 1, prompt, answers[a], 1.0 if a == 2 else 0.0) for i, a in enumerate(picks)]
        L.update(Batch(steps=steps, learner_version=update))
        if float(probs()[2]) >= 0.9:
            break
    assert float(probs()[2]) >= 0.9, f"p(C) only reached {float(probs()[2]):.2f}"


def test_the_hf_backend_serves_the_policy_part_of_a_checkpoint(tiny_path, tmp_path):
    """A checkpoint holds the policy adapter at its root, the critic's under critic/ and the value
    head; the hf backend's logprobs for a completion equal the learner's policy logprobs."""
    from unstable_hf.inference import HFInference, HFInferenceOptions

    L = learner(tiny_path, lr=5e-2, critic_lr=5e-2)
    steps = [step(g, 0, 0, 1, [5 + g, 9, 11], [12, 13], 1.0 if g % 2 else -1.0) for g in range(6)]
    for update in range(3):
        L.update(Batch(steps=steps, learner_version=update))
    ckpt = L.save_checkpoint(str(tmp_path / "ckpt-3"), "ckpt-3")
    names = sorted(p.name for p in (tmp_path / "ckpt-3").iterdir())
    assert {"adapter_model.safetensors", "critic", "value_head.safetensors", "unstable_checkpoint.json"} <= set(names)
    backend = HFInference(HFInferenceOptions(device="cpu", max_tokens=4, lora=LORA))
    try:
        base = ModelRef(uid="base", kind="base", backend="hf", model=tiny_path)
        assert backend.load_checkpoint(Checkpoint(uid="ckpt-3", version=3, path=ckpt.path)) == 3
        ref = base.model_copy(update={"uid": "ckpt-3", "kind": "checkpoint", "adapter_path": ckpt.path, "version": 3})
        out = asyncio.run(backend.generate(GenerationRequest(model=ref, prompt="Your move:", seed=1)))
    finally:
        backend.close()
    with torch.no_grad():
        mine = L.policy.completion_logprobs(pack([Sequence(out.prompt_token_ids, out.completion_token_ids, [])]))
    assert mine.tolist() == pytest.approx(out.logprobs, abs=1e-4)


@pytest.mark.parametrize("config, message", [
    ({"reward": {"sampling": [{"name": "normalize"}]}, "buffer": {"name": "episode"}},
     "learner 'a2c' computes its own advantages .*remove the \\[reward\\] sampling transforms \\(normalize\\)"),
    ({"buffer": {"name": "step"}}, 'learner \'a2c\' needs whole episodes .*set \\[buffer\\] name = "episode"'),
])
def test_configs_that_would_corrupt_its_targets_are_refused_by_the_check(tiny_path, tmp_path, config, message):
    from unstable_core import ConfigError, build

    base = {"name": "a2c-check", "train_envs": [{"env_id": "KuhnPoker-v0-train", "template": "qwen3-zs"}],
            "opponents": ["random-valid"], "model": {"model": tiny_path}, "inference": {"name": "hf", "device": "cpu"},
            "learner": {"name": "a2c", "device": "cpu"}, "training": {"learning_steps": 1, "batch_size": 4}}
    with pytest.raises(ConfigError, match=message):
        build({**base, **config}, run_dir=tmp_path / "run")


def test_a_run_with_a_sampling_transform_stops_with_one_message_and_status_2(tiny_path, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    lora = "{ rank = 4, alpha = 8 }"
    cfg = f"""
name = "a2c-refused"
train_envs = [{{ env_id = "KuhnPoker-v0-train", template = "qwen3-zs" }}]
opponents = ["random-valid"]
model = {{ model = "{tiny_path}" }}
inference = {{ name = "hf", device = "cpu", max_tokens = 4, lora = {lora} }}
learner = {{ name = "a2c", device = "cpu", lora = {lora} }}
reward = {{ sampling = [{{ name = "normalize" }}] }}
buffer = {{ name = "episode" }}
training = {{ learning_steps = 1, batch_size = 4 }}
"""
    path = tmp_path / "run.toml"
    path.write_text(cfg)
    proc = subprocess.Popen([sys.executable, "-c", "from unstable_core.cli import main; main()", "run", str(path),
                             "--run-dir", str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err
    assert "remove the [reward] sampling transforms (normalize)" in err and "Traceback" not in err


def test_the_critic_reads_the_same_values_from_prefix_shared_rows(tiny_path):
    from transformers import AutoTokenizer

    from unstable_hf.testing import self_play_steps
    from unstable_hf.training import pack_segments, pack_shared, sequences

    steps = self_play_steps(AutoTokenizer.from_pretrained(tiny_path), "KuhnPoker-v0-train", n=20)
    steps = [s for s in steps if s.game_idx < steps[-1].game_idx]  # whole games only
    L = learner(tiny_path, dtype="float64", critic_lr=5e-2, mini_batch_size=16)
    L.update(Batch(steps=steps, learner_version=0))  # a critic that is not all zeros
    seqs = sequences(steps)
    with torch.no_grad():
        shared = pack_shared(seqs, budget=4096, dtype=torch.float64)
        padded, shared_values = pack(seqs), L.critic.values(shared)
        assert shared.forward_tokens < 0.6 * shared.sequence_tokens
        assert torch.allclose(shared_values, L.critic.values(padded), rtol=1e-10, atol=1e-12)
        assert float(shared_values.std()) > 0
        segments = pack_segments(seqs, forward_cost=10.0)  # the other layout: cached-prefix segments
        assert len(segments.segments) < len(seqs) and segments.forward_tokens < 0.8 * segments.sequence_tokens
        assert torch.allclose(L.critic.values(segments), L.critic.values(padded), rtol=1e-10, atol=1e-12)


def test_prepare_reads_the_critic_over_the_learners_token_chunks(tiny_path):
    """``prepare`` forwards the batch in the chunks the update takes (here cut by tokens): the
    same targets as one chunk, from more, smaller forwards."""
    from transformers import AutoTokenizer

    from unstable_hf.testing import self_play_steps

    steps = self_play_steps(AutoTokenizer.from_pretrained(tiny_path), "KuhnPoker-v0-train", n=20)
    steps = [s for s in steps if s.game_idx < steps[-1].game_idx]  # whole games only
    found = []
    for tokens in (None, 600):
        L = learner(tiny_path, dtype="float64", mini_batch_size=32, mini_batch_tokens=tokens)
        with torch.no_grad():
            for p in L.critic.named_parameters().values():  # a critic that is not all zeros, the same in both
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3), dtype=p.dtype) * 0.05)
        forwards = []
        values = L.critic.values
        L.critic.values = lambda packed: forwards.append(len(packed.completion_lengths)) or values(packed)
        found.append((targets(L, steps), forwards))
    (one, [n]), (cut, sizes) = found
    assert n == len(steps) and len(sizes) > 2 and sum(sizes) == len(steps)
    for key, value in one.items():
        assert cut[key] == pytest.approx(value, rel=1e-9, abs=1e-12)
