"""The A2C loss's gradient equals central finite differences of the same loss (float64 model),
with each critic kind, with gradient checkpointing on and off.

With ``critic = "adapter"`` the critic's forward runs under its own LoRA adapter of the policy's
backbone and the policy's under the policy's; gradient checkpointing recomputes each decoder
layer in backward, when the policy's adapter is the active one again. The gradient is right only
if each recomputation runs under the adapter its forward used."""

import pytest
import torch
from transformers import AutoTokenizer

from unstable_a2c.learner import A2CLearner
from unstable_a2c.options import A2COptions
from unstable_hf.testing import self_play_steps

torch.set_num_threads(1)


def whole_games(tiny_path, n=14):
    steps = self_play_steps(AutoTokenizer.from_pretrained(tiny_path), "KuhnPoker-v0-train", n=n, seed=2)
    return [s for s in steps if s.game_idx < steps[-1].game_idx]


def build(tiny_path, critic, checkpointing):
    options = A2COptions(device="cpu", dtype="float64", lora={"rank": 4, "alpha": 8}, critic=critic,
                         gradient_checkpointing=checkpointing, gamma=0.9, gae_lambda=0.8, max_generation_len=16,
                         mini_batch_size=64, prefix_sharing=False)
    L = A2CLearner(options, tiny_path, seed=0)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():  # every weight matters: LoRA B and the value head start at zero
        for p in L.trainable().values():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.1)
    return L


def directional(L, steps, direction, eps=1e-2):
    """(autograd's derivative of the loss along ``direction`` (a unit vector), the central
    difference), in train mode (where checkpointing acts), with what ``prepare`` computed held
    fixed. Qwen3's RMSNorm computes in float32 even in a float64 model: the loss carries about
    5e-8 of rounding noise, so the step is 1e-2 (measured: steps of 1e-3 to 1e-5 leave 5e-5 to
    1e-2 relative noise; 1e-2 agrees with autograd to 5e-6 along the critic's weights)."""
    params = L.trainable()
    L.prepare_batch(steps)
    L.model.train()
    for p in params.values():
        p.grad = None
    loss, _ = L.loss(steps, len(steps))
    loss.backward()
    analytic = sum(float((p.grad * direction[n]).sum()) for n, p in params.items() if p.grad is not None)
    with torch.no_grad():
        def moved(sign):
            for n, p in params.items():
                p.add_(direction[n], alpha=sign * eps)
            value = float(L.loss(steps, len(steps))[0])
            for n, p in params.items():
                p.sub_(direction[n], alpha=sign * eps)
            return value

        numeric = (moved(1) - moved(-1)) / (2 * eps)
    return analytic, numeric


@pytest.mark.parametrize("critic", ["adapter", "model"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_the_loss_gradient_equals_finite_differences(tiny_path, critic, checkpointing):
    steps = whole_games(tiny_path)
    L = build(tiny_path, critic, checkpointing)
    checkpointed = L.model.get_base_model().model.gradient_checkpointing
    assert checkpointed == checkpointing
    if critic == "model":  # the separate critic is checkpointed as the policy is
        assert L.critic.model.get_base_model().model.gradient_checkpointing == checkpointing
    g = torch.Generator().manual_seed(11)
    params = L.trainable()
    critic_names = set(L.critic.named_parameters())
    for part in ("critic", "policy", "all"):  # each part's own derivative, then both
        direction = {n: torch.randn(p.shape, generator=g, dtype=p.dtype) * (
                     part == "all" or (n in critic_names) == (part == "critic")) for n, p in params.items()}
        norm = sum(float((d * d).sum()) for d in direction.values()) ** 0.5
        analytic, numeric = directional(L, steps, {n: d / norm for n, d in direction.items()})
        assert abs(numeric) > 1e-4, (part, numeric)
        assert analytic == pytest.approx(numeric, rel=1e-4, abs=1e-6), (part, analytic, numeric)
