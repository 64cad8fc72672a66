import math
import os
import random
import time

import pytest
import torch

from unstable_core import Batch, Step, Turn
from unstable_hf.testing import max_weight_diff, self_play_batches, trainable_copy
from unstable_hf.training import Sequence, pack, sequences
from unstable_reinforce.learner import ReinforceLearner
from unstable_reinforce.options import ReinforceOptions

torch.set_num_threads(1)


def step(prompt, completion, reward, old=None, version=0):
    t = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=prompt, completion="c",
             completion_token_ids=completion, logprobs=old or [], policy_version=version, action="[x]", format_ok=True)
    return Step(env_id="E", game_idx=0, player_id=0, turn_index=0, num_turns=1, turn=t, final_reward=reward, reward=reward)


def learner(tiny_path, **kw):
    opts = ReinforceOptions(**{"device": "cpu", "lora": {"rank": 4, "alpha": 8}, **kw})
    return ReinforceLearner(opts, tiny_path, seed=0)


def randomize_lora(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)


def test_gradient_equals_hand_computed_reinforce_in_float64(tiny_path):
    L = learner(tiny_path, dtype="float64", normalizer="max_generation_len", max_generation_len=7, mini_batch_size=2)
    randomize_lora(L.model)
    steps = [step([5, 6, 7, 8], [9, 10, 3], 1.5), step([11, 12], [13, 3], -0.5), step([14, 15, 16], [17], 2.0)]
    loss, _ = L.loss(steps, batch_size=len(steps))
    grads = torch.autograd.grad(loss, L.params)
    # reference: full logits through the ordinary forward, log_softmax, explicit REINFORCE sum
    ref_loss = 0.0
    for s in steps:
        ids = torch.tensor([s.turn.prompt_token_ids + s.turn.completion_token_ids])
        logits = L.model(input_ids=ids).logits[0].double()
        logp = torch.log_softmax(logits, -1)
        p = len(s.turn.prompt_token_ids)
        tok_lp = torch.stack([logp[p - 1 + j, t] for j, t in enumerate(s.turn.completion_token_ids)])
        ref_loss = ref_loss + (-s.reward * tok_lp.sum() / 7) / len(steps)
    ref_grads = torch.autograd.grad(ref_loss, L.params)
    assert abs(loss.item() - ref_loss.item()) < 1e-10
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-8)
    assert any(float(g.abs().sum()) > 0 for g in grads)


def test_token_count_normalizer(tiny_path):
    L = learner(tiny_path, dtype="float64", normalizer="tokens")
    s = step([5, 6], [9, 10, 3], 1.0)
    loss, _ = L.loss([s], 1)
    L2 = learner(tiny_path, dtype="float64", normalizer="max_generation_len", max_generation_len=3)
    L2.model.load_state_dict(L.model.state_dict())
    loss2, _ = L2.loss([s], 1)
    assert abs(float(loss) - float(loss2)) < 1e-12  # 3 tokens == constant 3


def test_exactly_one_step_per_update_and_preclip_norm(tiny_path):
    L = learner(tiny_path, grad_clip=1e-6, lr=1e-3, normalizer="tokens")
    randomize_lora(L.model)
    steps = [step([5, 6, 7], [9, 3], 1.0), step([8, 9], [10, 3], -1.0)]
    loss, _ = L.loss(steps, 2)
    loss.backward()
    expected = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in L.params))
    L.optimizer.zero_grad(set_to_none=True)
    before = [p.detach().clone() for p in L.params]
    metrics = L.update(Batch(steps=steps, learner_version=0))
    assert metrics["grad_norm"] == pytest.approx(expected, rel=1e-5) and expected > 1e-3
    assert L.version == 1 and L.optimizer.state[L.params[0]]["step"] == 1
    assert any(not torch.equal(a, p) for a, p in zip(before, L.params))
    L.update(Batch(steps=steps, learner_version=1))
    assert L.version == 2


def test_modules_to_save_trains_the_final_norm_and_saves_it(tiny_path, tmp_path):
    """``lora.modules_to_save = ["model.norm"]``: the final RMSNorm gain is trained (a copy: the
    base model's stays as it was) and saved in the checkpoint, which peft loads back exactly."""
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    L = learner(tiny_path, lr=1e-2, lora={"rank": 4, "alpha": 8, "modules_to_save": ["model.norm"]})
    randomize_lora(L.model)
    names = [n for n in L.trainable() if "lora_" not in n]
    assert names == ["base_model.model.model.norm.modules_to_save.default.weight"]
    gain = dict(L.model.named_parameters())[names[0]]
    base_gain = AutoModelForCausalLM.from_pretrained(tiny_path).model.norm.weight.detach()
    assert torch.equal(gain.detach(), base_gain)
    L.update(Batch(steps=[step([5, 6, 7], [9, 3], 1.0), step([8, 9], [10, 3], -1.0)], learner_version=0))
    assert not torch.equal(gain.detach(), base_gain)
    ckpt = L.save_checkpoint(str(tmp_path / "ckpt-1"), "ckpt-1")
    with safe_open(os.path.join(ckpt.path, "adapter_model.safetensors"), "pt") as f:
        assert torch.equal(f.get_tensor("base_model.model.model.norm.weight"), gain.detach())
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_path), ckpt.path)
        assert torch.equal(L.model(input_ids=ids).logits, loaded(input_ids=ids).logits)


def test_truncation_keeps_completion(tiny_path):
    L = learner(tiny_path, max_train_len=5)
    (seq,) = sequences([step(list(range(20, 30)), [9, 10, 3], 1.0)], L.options.max_train_len)
    assert seq.completion == [9, 10, 3] and seq.prompt == [28, 29]


def test_rejects_steps_without_token_ids(tiny_path):
    L = learner(tiny_path)
    with pytest.raises(ValueError, match="rollout ids"):
        L.loss([step([1, 2], [], 1.0)], 1)


def test_importance_sampling(tiny_path):
    L = learner(tiny_path, dtype="float64", importance_sampling=True, is_cap=2.0)
    s = step([5, 6, 7], [9, 3], 1.0)
    with torch.no_grad():
        current = L.policy.completion_logprobs(L.pack([s]))
    on_policy = step([5, 6, 7], [9, 3], 1.0, old=current.tolist())
    loss_is, stats = L.loss([on_policy], 1)
    L.options = L.options.model_copy(update={"importance_sampling": False})
    loss_plain, _ = L.loss([s], 1)
    assert stats["is_ratio_mean"] == pytest.approx(1.0) and float(loss_is) == pytest.approx(float(loss_plain))
    L.options = L.options.model_copy(update={"importance_sampling": True})
    stale = step([5, 6, 7], [9, 3], 1.0, old=[-50.0, -50.0])  # rollout was far less likely
    loss_stale, stats = L.loss([stale], 1)
    assert stats["is_clipped_frac"] == 1.0
    assert float(loss_stale) == pytest.approx(2.0 * float(loss_plain))  # weight capped at 2


def test_save_load_identical_logits_and_atomic_save(tiny_path, tmp_path, monkeypatch):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    L = learner(tiny_path)
    randomize_lora(L.model, seed=3)
    ckpt = L.save_checkpoint(str(tmp_path / "ckpt-1"), "ckpt-1")
    assert sorted(os.listdir(ckpt.path)) == ["README.md", "adapter_config.json", "adapter_model.safetensors", "unstable_checkpoint.json"] or \
        {"adapter_config.json", "adapter_model.safetensors", "unstable_checkpoint.json"} <= set(os.listdir(ckpt.path))
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        mine = L.model(input_ids=ids).logits
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_path), ckpt.path)
        theirs = loaded(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_path)(input_ids=ids).logits
    assert torch.equal(mine, theirs)
    assert not torch.allclose(mine, base)  # the adapter does something

    # a crash in the middle of saving leaves neither a half-written checkpoint nor temp files
    def boom(path, **kw):
        (os.makedirs(path, exist_ok=True), open(os.path.join(path, "adapter_model.safetensors"), "wb").write(b"partial"))
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(L.model, "save_pretrained", boom)
    with pytest.raises(KeyboardInterrupt):
        L.save_checkpoint(str(tmp_path / "ckpt-2"), "ckpt-2")
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1"]


def test_toy_one_step_game_learns_best_action(tiny_path):
    """A one-step game with a known best action: the probability of answering 'C' among the four
    letters rises from about chance to at least 0.9."""
    from transformers import AutoTokenizer

    start = time.monotonic()
    tok = AutoTokenizer.from_pretrained(tiny_path)
    prompt = tok("Pick the best letter: A, B, C or D.", add_special_tokens=False)["input_ids"]
    answers = [tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for a in "ABCD"]
    L = learner(tiny_path, lr=3e-3, max_generation_len=2, lora={"rank": 8, "alpha": 16})

    def probs():
        with torch.no_grad():
            packed = pack([Sequence(prompt, a, []) for a in answers])
            return torch.softmax(packed.per_step(L.policy.completion_logprobs(packed)), 0)

    p0 = probs()
    assert float(p0[2]) < 0.5
    rng = random.Random(0)
    for update in range(150):
        p = probs().tolist()
        picks = rng.choices(range(4), weights=p, k=16)
        rewards = [1.0 if a == 2 else 0.0 for a in picks]
        mean = sum(rewards) / len(rewards)
        steps = [step(prompt, answers[a], r - mean) for a, r in zip(picks, rewards)]
        if any(s.reward for s in steps):
            L.update(Batch(steps=steps, learner_version=update))
        if float(probs()[2]) >= 0.9:
            break
    assert float(probs()[2]) >= 0.9, f"p(C) only reached {float(probs()[2]):.2f}"
    assert time.monotonic() - start < 60


def test_gradient_checkpointing_gives_the_same_update(tiny_path):
    steps = [step([5, 6, 7], [9, 3], 1.0), step([8, 9], [10, 3], -1.0)]
    results = []
    for ckpt in (False, True):
        L = learner(tiny_path, dtype="float64", gradient_checkpointing=ckpt, lr=1e-2, normalizer="tokens")
        randomize_lora(L.model, seed=5)
        m = L.update(Batch(steps=steps, learner_version=0))
        results.append((m["loss"], m["grad_norm"], [p.detach().clone() for p in L.params]))
    (l0, g0, p0), (l1, g1, p1) = results
    assert l0 == pytest.approx(l1, rel=1e-9) and g0 == pytest.approx(g1, rel=1e-9) and g0 > 0
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(p0, p1))


def ppo_batches(tiny_path):
    from transformers import AutoTokenizer

    return self_play_batches(AutoTokenizer.from_pretrained(tiny_path), 2, 12, seed=7)


def test_one_epoch_with_a_clip_is_reinforce(tiny_path):
    """At the first pass every ratio is 1: the clipped surrogate's gradient is REINFORCE's."""
    common = {"dtype": "float64", "lr": 5e-3, "max_generation_len": 16, "mini_batch_size": 4}
    plain, clipped = learner(tiny_path, **common), learner(tiny_path, **common, clip_ratio=0.2)
    for batch in ppo_batches(tiny_path):
        a, b = plain.update(batch), clipped.update(batch)
        assert abs(a["grad_norm"] - b["grad_norm"]) < 1e-12 and a["grad_norm"] > 0
        assert b["ratio_mean"] == 1.0 and b["clipped_frac"] == 0.0
    wa, wb = trainable_copy(plain), trainable_copy(clipped)
    assert max_weight_diff(wa, wb) < 1e-12


def reference_ppo(lrn, batch, epochs, eps):
    """PPO by hand on the whole batch in one padded forward: the surrogate written with
    torch.where on which side of the clip each token is, AdamW stepped per pass."""
    seqs = sequences(batch.steps, lrn.options.max_train_len)
    old = None
    for _ in range(epochs):
        lrn.optimizer.zero_grad(set_to_none=True)
        packed = pack(seqs, "cpu")
        logp = lrn.policy.completion_logprobs(packed)
        old = logp.detach() if old is None else old
        adv = torch.tensor([s.reward for s in batch.steps], dtype=logp.dtype)[packed.rows]
        ratio = torch.exp(logp - old)
        past = ((adv > 0) & (ratio > 1 + eps)) | ((adv < 0) & (ratio < 1 - eps))
        term = torch.where(past, (torch.where(adv > 0, 1 + eps, 1 - eps) * adv).to(logp.dtype), ratio * adv)
        per_step = torch.zeros(len(batch.steps), dtype=logp.dtype).index_add(0, packed.rows, term)
        (-(per_step / lrn.options.max_generation_len).sum() / len(batch.steps)).backward()
        torch.nn.utils.clip_grad_norm_(lrn.params, lrn.options.grad_clip)
        lrn.optimizer.step()


def test_several_epochs_follow_a_hand_written_ppo_and_the_clip_binds(tiny_path):
    common = {"dtype": "float64", "lr": 3e-2, "max_generation_len": 16, "prefix_sharing": False, "grad_clip": 100.0}
    ppo = learner(tiny_path, **common, mini_batch_size=5, epochs=4, clip_ratio=0.05)
    ref = learner(tiny_path, **common, mini_batch_size=64, epochs=4, clip_ratio=0.05)
    loose = learner(tiny_path, **common, mini_batch_size=5, epochs=4, clip_ratio=0.95)
    clipped_fracs = []
    for batch in ppo_batches(tiny_path):
        metrics = ppo.update(batch)
        loose.update(batch)
        reference_ppo(ref, batch, epochs=4, eps=0.05)
        clipped_fracs.append(metrics["clipped_frac"])
    assert ppo.version == 2  # a version per update, not per pass
    assert ppo.optimizer.state[ppo.params[0]]["step"] == 8  # four optimizer steps an update
    w, r, lw = trainable_copy(ppo), trainable_copy(ref), trainable_copy(loose)
    assert max_weight_diff(w, r) < 1e-9
    assert max(clipped_fracs) > 0.05  # the later passes moved tokens past the clip ...
    assert max_weight_diff(w, lw) > 1e-4  # ... and that changed the update
    # a loss computed outside an update is a first pass of its own: no logprobs cached from the last update
    _loss, stats = ppo.loss([step([5, 6, 7], [9, 10, 3], 1.0), step([11, 12], [13, 3], -0.5)], batch_size=2)
    assert (ppo.epoch, ppo.chunk_index) == (0, 0) and stats["ratio_mean"] == 1.0


def test_epochs_without_a_clip_are_refused_naming_both_keys():
    with pytest.raises(ValueError, match=r"epochs = 3 .*clip_ratio"):
        ReinforceOptions(epochs=3)


def reference_token_logprobs(lrn, steps):
    """Each step's completion-token logprobs from the ordinary forward's full logits (float64)."""
    out = []
    for s in steps:
        ids = torch.tensor([s.turn.prompt_token_ids + s.turn.completion_token_ids])
        logp = torch.log_softmax(lrn.model(input_ids=ids).logits[0].double(), -1)
        p = len(s.turn.prompt_token_ids)
        out.append(torch.stack([logp[p - 1 + j, t] for j, t in enumerate(s.turn.completion_token_ids)]))
    return out


def test_importance_weights_are_the_first_pass_s_on_every_pass_as_decoupled_ppo(tiny_path):
    """Decoupled PPO (Hilton et al. 2021; AReaL): behaviour policy = the rollout's, proximal policy =
    the policy at the update's start. Each token's term on pass k is
    min(pi_start / pi_roll, cap) * min(r A, clip(r) A) with r = pi / pi_start: the IS weight is fixed
    at the first pass, not recomputed from the current logprobs (which would weigh by
    (pi / pi_roll)(pi / pi_start)). The second pass's weights and gradient against a float64 hand
    computation from full logits."""
    cap, eps, norm = 1.3, 0.5, 8
    L = learner(tiny_path, dtype="float64", importance_sampling=True, is_cap=cap, epochs=2, clip_ratio=eps,
                max_generation_len=norm)
    randomize_lora(L.model, seed=3)
    shapes = [([5, 6, 7, 8], [9, 10, 3], 1.5), ([11, 12], [13, 3], -0.5), ([14, 15, 16], [17, 18], 2.0)]
    with torch.no_grad():
        start = reference_token_logprobs(L, [step(p, c, r) for p, c, r in shapes])
    offsets = [[0.4, -0.3, 0.05], [-0.2, 0.6], [0.1, -0.5]]  # rollout logprobs apart from the start's
    steps = [step(p, c, r, old=(lp + torch.tensor(o, dtype=torch.float64)).tolist())
             for (p, c, r), lp, o in zip(shapes, start, offsets)]
    # the learner holds rollout logprobs in float32 (``Packed.rollout_logprobs``)
    rollout = torch.cat([torch.tensor(s.turn.logprobs, dtype=torch.float32).double() for s in steps])
    start_ratio = torch.exp(torch.cat(start) - rollout)
    weight = start_ratio.clamp(max=cap)

    L.epoch = L.chunk_index = 0
    _loss, first = L.loss(steps, batch_size=len(steps))
    assert first["is_ratio_mean"] == pytest.approx(float(start_ratio.mean()), abs=1e-10)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():  # the policy moves between the passes
        for p in L.params:
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)
    L.epoch = 1
    loss, second = L.loss(steps, batch_size=len(steps))
    grads = torch.autograd.grad(loss, L.params)
    L.epoch = 0
    # the weights of pass 2 are the start's
    assert second["is_ratio_mean"] == pytest.approx(float(start_ratio.mean()), abs=1e-10)
    assert second["is_clipped_frac"] == pytest.approx(float((start_ratio > cap).double().mean()), abs=1e-7)

    now = reference_token_logprobs(L, steps)
    ref_loss, at = 0.0, 0
    for s, lp, lp0 in zip(steps, now, start):
        r = torch.exp(lp - lp0)
        w = weight[at : at + len(lp)]
        at += len(lp)
        term = w * torch.minimum(r * s.reward, r.clamp(1 - eps, 1 + eps) * s.reward)
        ref_loss = ref_loss - term.sum() / norm / len(steps)
    ref_grads = torch.autograd.grad(ref_loss, L.params)
    assert abs(loss.item() - ref_loss.item()) < 1e-10
    moved = torch.cat([torch.exp(lp - lp0) for lp, lp0 in zip(now, start)])
    assert float((moved - 1).abs().max()) > 0.05  # the policy did move: recomputed weights would differ
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-8)
    assert any(float(x.abs().sum()) > 0 for x in grads)


def test_after_the_zero_advantage_filter_the_loss_is_the_mean_over_the_kept_steps(tiny_path):
    """The update divides by the steps it gets (the kept count), not by the steps drawn before the
    filter (``Batch.dropped`` does not enter it): a batch with its zero-advantage steps dropped
    takes the step of the whole batch times drawn / kept, in the same direction."""
    steps = [step([5, 6, 7], [9, 3], 1.0), step([8, 9], [10, 3], 0.0), step([11, 12], [13, 3], -0.5),
             step([14, 15], [16, 3], 0.0)]
    kept = [s for s in steps if s.reward != 0.0]
    norms = []
    for batch in (Batch(steps=steps, learner_version=0), Batch(steps=kept, learner_version=0, dropped=2),
                  Batch(steps=kept, learner_version=0)):
        L = learner(tiny_path, dtype="float64", mini_batch_size=2, grad_clip=1e6)
        randomize_lora(L.model, seed=2)
        norms.append(L.update(batch)["grad_norm"])
    whole, filtered, alone = norms
    assert filtered == pytest.approx(alone, rel=1e-12)
    assert filtered == pytest.approx(whole * len(steps) / len(kept), rel=1e-9) and whole > 0
