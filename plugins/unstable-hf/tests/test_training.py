"""The learner toolkit: packing by hand-checked positions, logprobs with the adapter on and off
against a plain forward pass, and a learner written as a loss alone."""

import pytest
import torch

from unstable_core import Batch, Step, Turn
from unstable_hf.options import LearnerOptions
from unstable_hf.testing import trainable_copy
from unstable_hf.training import LoraLearner, Sequence, pack, sequences

torch.set_num_threads(1)


def step(prompt, completion, reward, old=None):
    t = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=prompt, completion="c",
             completion_token_ids=completion, logprobs=old or [], action="[x]", format_ok=True)
    return Step(env_id="E", game_idx=0, player_id=0, turn_index=0, num_turns=1, turn=t, final_reward=reward, reward=reward)


class PlainReinforce(LoraLearner):
    """The docstring's example: a learner is its loss."""

    def loss(self, steps, batch_size):
        packed = self.pack(steps)
        per_step = packed.per_step(self.policy.completion_logprobs(packed))
        return -(packed.tensor([s.reward for s in steps], dtype=per_step.dtype) * per_step).sum() / batch_size, {"x": 1.0}


def learner(tiny_path, **kw):
    return PlainReinforce(LearnerOptions(**{"device": "cpu", "lora": {"rank": 4, "alpha": 8}, **kw}), tiny_path, seed=0)


def test_pack_marks_the_positions_that_predict_completion_tokens():
    p = pack([Sequence([5, 6, 7], [8, 9], [-0.5]), Sequence([1], [2, 3, 4], [])])
    assert p.ids.tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 4, 0]]
    assert p.attention.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert p.predict_index.tolist() == [2, 3, 5, 6, 7]  # row 0: positions 2, 3; row 1 (from 5): 0, 1, 2
    assert p.targets.tolist() == [8, 9, 2, 3, 4] and p.rows.tolist() == [0, 0, 1, 1, 1]
    assert p.last_prompt_index.tolist() == [2, 5] and p.completion_lengths.tolist() == [2, 3]
    old = p.rollout_logprobs.tolist()
    assert old[0] == -0.5 and all(x != x for x in old[1:])  # unknown: nan
    assert p.per_step(torch.arange(5.0)).tolist() == [1.0, 9.0]


def test_sequences_truncate_the_prompt_first_and_refuse_missing_ids():
    (s,) = sequences([step(list(range(20, 30)), [9, 10, 3], 1.0, old=[-1.0, -2.0, -3.0])], max_train_len=4)
    assert s.prompt == [29] and s.completion == [9, 10, 3] and s.rollout_logprobs == [-1.0, -2.0, -3.0]
    with pytest.raises(ValueError, match="rollout ids"):
        sequences([step([1, 2], [], 1.0)])


def test_logprobs_with_the_adapter_on_and_off_match_a_plain_forward(tiny_path):
    L = learner(tiny_path, dtype="float64")
    with torch.no_grad():
        for name, p in L.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, dtype=p.dtype) * 0.1)
    s = step([5, 6, 7, 8], [9, 10, 3], 1.0)
    packed = L.pack([s])
    ids = torch.tensor([s.turn.prompt_token_ids + s.turn.completion_token_ids])

    def reference(adapter):
        with torch.no_grad():
            if adapter:
                logits = L.model(input_ids=ids).logits[0]
            else:
                with L.model.disable_adapter():
                    logits = L.model(input_ids=ids).logits[0]
        logp = torch.log_softmax(logits, -1)
        return [float(logp[3 + j, t]) for j, t in enumerate(s.turn.completion_token_ids)]

    on, off = L.policy.completion_logprobs(packed), L.policy.completion_logprobs(packed, adapter=False)
    assert on.tolist() == pytest.approx(reference(True), abs=1e-10)
    assert off.tolist() == pytest.approx(reference(False), abs=1e-10)
    assert not off.requires_grad and on.requires_grad
    assert max(abs(a - b) for a, b in zip(on.tolist(), off.tolist())) > 1e-4  # the adapter matters


def test_a_learner_written_as_its_loss_makes_one_step_per_update(tiny_path, tmp_path):
    L = learner(tiny_path, lr=1e-2, mini_batch_size=1)
    steps = [step([5, 6, 7], [9, 3], 1.0), step([8, 9], [10, 3], -1.0), step([4, 5], [6], 0.5)]
    before = trainable_copy(L)
    metrics = L.update(Batch(steps=steps, learner_version=0))
    assert L.version == 1 and L.optimizer.state[L.params[0]]["step"] == 1  # three chunks, one step
    assert all(isinstance(v, float) for v in metrics.values()) and metrics["x"] == 1.0
    assert metrics["train_tokens"] == 5.0 and metrics["grad_norm"] > 0
    assert any(not torch.equal(before[n], p) for n, p in L.trainable().items())
    ckpt = L.save_checkpoint(str(tmp_path / "ckpt-1"), "ckpt-1")
    assert ckpt.version == 1 and (tmp_path / "ckpt-1" / "adapter_model.safetensors").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left
