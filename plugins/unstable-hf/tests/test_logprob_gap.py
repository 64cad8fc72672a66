"""The toolkit's live check: every LoraLearner's update reports the gap between the rollout
logprobs and its own, on the tokens of the steps its current version played, at the first pass.
The exact rollout logprobs here come from a plain forward of the adapted model (full logits,
log-softmax), not through the toolkit's packing and chunked logprobs."""

import pytest
import torch

from unstable_core import Batch, Step, Turn
from unstable_hf.options import LearnerOptions
from unstable_hf.training import LoraLearner

torch.set_num_threads(1)


def step(game, prompt, completion, old, version, reward=1.0):
    t = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=prompt, completion="c",
             completion_token_ids=completion, logprobs=old, policy_version=version, action="[x]", format_ok=True)
    return Step(env_id="E", game_idx=game, player_id=0, turn_index=0, num_turns=1, turn=t, final_reward=reward, reward=reward)


class PlainReinforce(LoraLearner):
    def loss(self, steps, batch_size):
        packed = self.pack(steps)
        per_step = packed.per_step(self.policy.completion_logprobs(packed))
        return -(packed.tensor([s.reward for s in steps], dtype=per_step.dtype) * per_step).sum() / batch_size, {}


class ReferenceFirst(PlainReinforce):
    """Asks for the frozen base model's logprobs before the policy's (a KL term), and takes two
    optimizer steps an update: neither the reference's nor the second pass's are compared."""

    def epochs(self):
        return 2

    def loss(self, steps, batch_size):
        packed = self.pack(steps)
        ref = self.policy.completion_logprobs(packed, adapter=False)
        logp = self.policy.completion_logprobs(packed)
        per_step = packed.per_step(logp + (logp - ref) ** 2)
        return -(packed.tensor([s.reward for s in steps], dtype=per_step.dtype) * per_step).sum() / batch_size, {}


def adapted(L, seed=0):
    """Random LoRA weights (the policy is no longer the base model); the exact logprobs of PAIRS."""
    g = torch.Generator().manual_seed(seed)
    out = []
    with torch.no_grad():
        for name, p in L.model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.1)
        for prompt, completion in PAIRS:
            logp = torch.log_softmax(L.model(input_ids=torch.tensor([prompt + completion])).logits[0].double(), -1)
            out.append([float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(completion)])
    return out


PAIRS = [([5, 6, 7, 8], [9, 10, 3]), ([5, 6, 7, 11], [12, 3]), ([20, 21], [22, 23, 24, 3]), ([30, 31, 32], [33, 3])]


def batch(exact, version):
    """Four steps at ``version``: exact rollout logprobs, logprobs shifted by 0.1, none reported
    (NaN: skipped), and one played by an older version with logprobs off by 1 (not compared)."""
    steps = [
        step(0, *PAIRS[0], exact[0], version),
        step(1, *PAIRS[1], [x + 0.1 for x in exact[1]], version),
        step(2, *PAIRS[2], [], version),
        step(3, *PAIRS[3], [x - 1.0 for x in exact[3]], version - 1),
    ]
    return steps, len(PAIRS[0][1]) + len(PAIRS[1][1]), len(PAIRS[1][1])


@pytest.mark.parametrize("cls,layout", [(PlainReinforce, "padded"), (PlainReinforce, "masks"), (PlainReinforce, "segments"),
                                        (ReferenceFirst, "masks")])
def test_the_gap_is_measured_on_the_current_version_s_reported_tokens_once(tiny_path, cls, layout):
    options = {"prefix_sharing": False} if layout == "padded" else {"prefix_layout": layout}
    L = cls(LearnerOptions(device="cpu", lr=1e-2, mini_batch_size=2, lora={"rank": 4, "alpha": 8}, **options), tiny_path)
    L.version = 3
    steps, tokens, shifted = batch(adapted(L), version=3)
    metrics = L.update(Batch(steps=steps, learner_version=3))
    assert metrics["logprob_gap_tokens"] == tokens
    assert metrics["logprob_gap_mean"] == pytest.approx(0.1 * shifted / tokens, abs=1e-5)
    assert metrics["logprob_gap_max"] == pytest.approx(0.1, abs=1e-5)
    # the next update: the learner is at version 4, these steps were played by 3 and 2
    metrics = L.update(Batch(steps=steps, learner_version=4))
    assert metrics["logprob_gap_tokens"] == 0 and "logprob_gap_mean" not in metrics and "logprob_gap_max" not in metrics


def test_exact_rollout_logprobs_give_no_gap(tiny_path):
    L = PlainReinforce(LearnerOptions(device="cpu", lr=1e-2, lora={"rank": 4, "alpha": 8}), tiny_path)
    exact = adapted(L)
    steps = [step(i, *pair, old, 0) for i, (pair, old) in enumerate(zip(PAIRS, exact))]
    metrics = L.update(Batch(steps=steps, learner_version=0))
    assert metrics["logprob_gap_tokens"] == sum(len(c) for _, c in PAIRS)
    assert metrics["logprob_gap_max"] <= 1e-5
