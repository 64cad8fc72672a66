"""Prefix-shared packing: the tries by hand, and logprobs and LoRA gradients equal to the padded
path on real self-play batches and corner cases (float64: logprobs to 1e-10, gradients to 1e-6
of the largest with the model as it ships, 1e-12 where nothing is shared, 1e-10 with its norms in
float64; float32: 1e-5)."""

import random

import pytest
import torch

from unstable_core import Batch, Step, Turn
from unstable_hf.options import LearnerOptions
from unstable_hf.testing import self_play_steps
from unstable_hf.training import LoraLearner, Sequence, pack_shared, sequences

torch.set_num_threads(1)


def test_the_trie_shares_prefixes_and_each_node_sees_only_its_ancestors():
    seqs = [Sequence([5, 6, 7], [8], []), Sequence([5, 6, 9], [10, 11], []), Sequence([5, 6, 7], [8], []), Sequence([1], [2], [])]
    p = pack_shared(seqs, budget=64)
    # sorted by ids: [1, 2] first, then 5 6 7 8 (twice: one path) and 5 6 9 10 11 branching after 6
    assert p.ids.tolist() == [[1, 2, 5, 6, 7, 8, 9, 10, 11]]
    assert p.position_ids.tolist() == [[0, 1, 0, 1, 2, 3, 2, 3, 4]]
    sees = (p.attention[0, 0] == 0).int().tolist()
    assert sees[1] == [1, 1, 0, 0, 0, 0, 0, 0, 0]  # token 2 sees 1
    assert sees[6] == [0, 0, 1, 1, 0, 0, 1, 0, 0]  # token 9 sees 5, 6 and itself, not 7 or 8
    assert sees[8] == [0, 0, 1, 1, 0, 0, 1, 1, 1]
    assert p.forward_tokens == 9 and p.sequence_tokens == 4 + 5 + 4 + 2
    # the duplicate steps predict from the same position; the prompt [5, 6, 9] ends at node 6
    assert p.predict_index.tolist() == [4, 6, 7, 4, 0]
    assert p.last_prompt_index.tolist() == [4, 6, 4, 0]
    assert p.targets.tolist() == [8, 10, 11, 8, 2] and p.rows.tolist() == [0, 1, 1, 2, 3]


def test_the_budget_starts_a_new_row_and_a_long_step_gets_one_of_its_own():
    seqs = [Sequence([1, 2, 3], [4], []), Sequence([1, 2, 5], [6], []), Sequence(list(range(10, 30)), [31], [])]
    p = pack_shared(seqs, budget=6)  # 1 2 3 4 5 6 fit in one trie; the 21-token step gets a row alone
    assert p.ids.shape[0] == 2 and p.forward_tokens == 6 + 21
    p = pack_shared(seqs, budget=5)  # the second step no longer fits: a new row, its own 1 2
    assert p.ids.shape[0] == 3 and p.forward_tokens == 4 + 4 + 21
    assert len({int(i) // p.ids.shape[1] for i in p.last_prompt_index}) == 3


def test_the_row_width_trades_shared_prefixes_against_dense_attention():
    from unstable_hf.prefix import row_width, split_rows

    lengths, shared = [100] * 4, [0, 50, 50, 50]  # four steps of 100 ids, neighbours sharing 50
    # R rows padded to W cost R x (W + w W^2): one row of 250 nodes, two of 150 or four of 100
    assert split_rows(lengths, shared, 256) == [250] and split_rows(lengths, shared, 192) == [150, 150]
    assert split_rows(lengths, shared, 128) == [100] * 4 and split_rows(lengths, shared, 0) == [100] * 4
    assert row_width(lengths, shared, budget=256, pair_weight=0.0) == 256  # 250 < 2 x 150 < 4 x 100
    assert row_width(lengths, shared, budget=256, pair_weight=0.01) == 192  # 2 x 375 < 4 x 200 < 875
    assert row_width(lengths, shared, budget=256, pair_weight=1.0) == 0  # 4 x 10,100 < 2 x 22,650
    assert row_width(lengths, [0, 0, 0, 0], budget=256, pair_weight=0.01) == 0  # nothing shared: a row each


def test_each_node_sees_exactly_the_nodes_on_its_path_for_random_batches():
    # the mask is read off preorder subtree ranges; check it against every step's own path
    from unstable_hf.prefix import place_sequences, visibility_mask

    rng = random.Random(0)
    for _ in range(30):
        seqs = [Sequence([rng.randrange(3) for _ in range(rng.randrange(1, 8))], [rng.randrange(3)], []) for _ in range(rng.randrange(1, 12))]
        tries, placed = place_sequences(seqs, budget=rng.choice([4, 8, 64]), pair_weight=0.0)
        for r, trie in enumerate(tries):
            expected = torch.zeros(trie.size, trie.size, dtype=torch.bool)
            for row, nodes in placed:
                if row == r:
                    for j, node in enumerate(nodes):
                        expected[node, nodes[: j + 1]] = True
            assert torch.equal(visibility_mask(trie), expected)
        for s, (r, nodes) in zip(seqs, placed):  # each node holds the step's token at its depth
            assert [tries[r].tokens[n] for n in nodes] == s.ids and [tries[r].depths[n] for n in nodes] == list(range(len(s.ids)))


def test_block_masks_let_each_token_see_what_the_dense_mask_does():
    # FlexAttention's BlockMask (CUDA's path) is built from the same subtree ends: its mask_mod
    # evaluated over every (query, key) pair equals the dense mask, padding included
    rng = random.Random(1)
    for _ in range(10):
        seqs = [Sequence([rng.randrange(3) for _ in range(rng.randrange(1, 9))], [rng.randrange(3)], []) for _ in range(rng.randrange(2, 12))]
        dense, block = pack_shared(seqs, budget=16), pack_shared(seqs, budget=16, block_mask=True)
        if dense.position_ids is None:  # nothing shared: packed padded, no 4D mask at all
            assert block.position_ids is None
            continue
        rows, width = dense.ids.shape
        assert torch.equal(block.ids, dense.ids) and torch.equal(block.position_ids, dense.position_ids)
        assert block.attention.shape == (rows, 1, width, width)
        q, k = torch.arange(width)[:, None], torch.arange(width)[None, :]
        for r in range(rows):
            sees = block.attention.mask_mod(torch.tensor(r), torch.tensor(0), q, k)
            assert torch.equal(sees, dense.attention[r, 0] == 0)


def test_the_trie_takes_sequences_in_sorted_order_only():
    from unstable_hf.prefix import Trie

    trie = Trie()
    trie.insert([1, 2, 3])
    with pytest.raises(ValueError, match="sorted order"):
        trie.insert([1, 2])


def test_segments_forward_a_groups_common_prefix_once_and_its_suffixes_against_it():
    from unstable_hf.segments import pack_segments

    seqs = [Sequence([5, 6, 7], [8], []), Sequence([5, 6, 9], [10, 11], []), Sequence([5, 6, 7], [8], [])]
    # a forward costs 10 tokens: one group (2 + 3 x 3 + 2 x 10 = 31) beats the duplicates apart (5 + 20 + 15)
    p = pack_segments(seqs, forward_cost=10.0)  # one group: prefix 5 6, suffixes 7 8 / 7 8 / 9 10 11 (sorted)
    (seg,) = p.segments
    assert seg.prefix.tolist() == [[5, 6]] and seg.ids.tolist() == [[7, 8, 0], [7, 8, 0], [9, 10, 11]]
    assert seg.attention.tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert seg.position_ids.tolist() == [[2, 3, 4]] * 3
    # flat hidden states: prefix 0-1, then rows of 3 from 2; step 0 is the first sorted row, step 2 the second
    assert p.predict_index.tolist() == [2, 8, 9, 5] and p.last_prompt_index.tolist() == [2, 8, 5]
    assert p.forward_tokens == 2 + 2 + 2 + 3 and p.sequence_tokens == 4 + 5 + 4 and p.ids.shape == (1, 11)
    # a prompt that is all prefix: the prediction of its completion reads the prefix's hidden state
    p = pack_segments([Sequence([5, 6], [7], []), Sequence([5, 6, 7, 8], [9], []), Sequence([5, 6, 7, 9], [10], [])], forward_cost=10.0)
    assert p.segments[0].prefix.tolist() == [[5, 6]] and p.last_prompt_index.tolist() == [1, 6, 9]
    assert p.predict_index.tolist() == [1, 6, 9]
    # nothing shared: one forward of padded rows, no prefix
    p = pack_segments([Sequence([1, 2], [3], []), Sequence([4], [5], [])], forward_cost=10.0)
    assert len(p.segments) == 1 and p.segments[0].prefix is None and p.segments[0].ids.tolist() == [[1, 2, 3], [4, 5, 0]]


def test_the_segment_plan_is_the_cheapest_cut_of_the_sorted_steps():
    # against every way to cut the steps into runs, the group cost as documented
    import itertools

    from unstable_hf.segments import group_cost, plan

    def cost_of(lengths, shared, i, j, pw, fc):
        prefix = min(min(shared[i + 1 : j]), min(lengths[i:j]) - 1) if j - i > 1 else 0
        return group_cost(prefix, j - i, max(lengths[i:j]) - prefix, pw, fc)

    rng = random.Random(2)
    for _ in range(40):
        seqs = [Sequence([rng.randrange(2) for _ in range(rng.randrange(1, 9))], [rng.randrange(2)], []) for _ in range(rng.randrange(1, 8))]
        from unstable_hf.prefix import sorted_steps

        _order, ids, shared = sorted_steps(seqs)
        lengths = [len(x) for x in ids]
        pw, fc = rng.choice([0.0, 0.05, 1.0]), rng.choice([0.0, 3.0, 50.0])
        got = plan(lengths, shared, pw, fc)
        assert [g[0] for g in got] == [0] + [g[1] for g in got[:-1]] and got[-1][1] == len(ids)
        got_cost = sum(cost_of(lengths, shared, i, j, pw, fc) for i, j, _p in got)
        n = len(ids)
        best = min(sum(cost_of(lengths, shared, a, b, pw, fc) for a, b in zip((0, *cuts), (*cuts, n)))
                   for k in range(n) for cuts in itertools.combinations(range(1, n), k))
        assert got_cost == pytest.approx(best)


def test_the_layout_choice_alternates_then_keeps_the_faster_per_token(caplog):
    from unstable_hf.layout import LayoutChoice

    choice = LayoutChoice(["masks", "segments"], trials=2, model="m")
    seconds = {"masks": [9e-3, 2e-3, 2.2e-3], "segments": [1e-4, 3e-3, 3.2e-3]}  # segments' warm-up alone is fast
    with caplog.at_level("INFO", logger="unstable.hf"):
        for _ in range(3):
            for expected in ("masks", "segments"):
                layout = choice.next()
                assert layout == expected and choice.chosen is None
                choice.record(layout, seconds[layout].pop(0), tokens=1000)
    assert choice.chosen == "masks" and choice.next() == "masks" and choice.next() == "masks"
    assert [r.getMessage() for r in caplog.records] == ["prefix layout for m: masks (masks 2.1, segments 3.1 µs a token)"]
    assert LayoutChoice(["padded"]).chosen == "padded"


def test_auto_layout_times_both_on_the_first_chunks_and_keeps_one(tiny_path, kuhn_steps, caplog):
    assert make(tiny_path, True).layouts.candidates == ["masks"]  # the default: reproducible runs
    L = make(tiny_path, True, mini_batch_size=3, prefix_layout="auto")  # 8 chunks an update
    assert L.layouts.candidates == ["masks", "segments"]
    with caplog.at_level("INFO", logger="unstable.hf"):
        m = L.update(Batch(steps=kuhn_steps, learner_version=0))
    assert L.layouts.chosen in ("masks", "segments") and 0.3 < m["prefix_share"] < 1 and m["prefix_segments"] == 0.5
    assert [len(t) for t in L.layouts.timings.values()] == [4, 4]
    assert len([r for r in caplog.records if "prefix layout" in r.getMessage()]) == 1
    m = L.update(Batch(steps=kuhn_steps, learner_version=1))
    assert [len(t) for t in L.layouts.timings.values()] == [4, 4] and L.layout == L.layouts.chosen
    assert m["prefix_segments"] == float(L.layout == "segments")


def test_a_restored_learner_gives_its_chunks_the_layouts_the_uninterrupted_one_would(tiny_path, kuhn_steps):
    import json

    L = make(tiny_path, True, mini_batch_size=8, prefix_layout="auto")  # 3 chunks: masks, segments, masks
    L.update(Batch(steps=kuhn_steps, learner_version=0))
    state = json.loads(json.dumps(L.state_dict()["prefix_layout"]))  # snapshots go through JSON
    R = make(tiny_path, True, mini_batch_size=8, prefix_layout="auto")
    R.layouts.load_state_dict(state)
    assert [R.layouts.next() for _ in range(3)] == [L.layouts.next() for _ in range(3)] == ["segments", "masks", "segments"]
    chosen = make(tiny_path, True, mini_batch_size=3, prefix_layout="auto")
    chosen.update(Batch(steps=kuhn_steps, learner_version=0))
    R = make(tiny_path, True, prefix_layout="auto")
    R.load_state_dict(chosen.state_dict())
    assert R.layouts.chosen == chosen.layouts.chosen is not None and R.layouts.timings == chosen.layouts.timings
    F = make(tiny_path, True)  # a fixed layout ignores a saved choice
    F.load_state_dict(chosen.state_dict())
    assert F.layouts.candidates == ["masks"] and F.layouts.chosen == "masks"


class Plain(LoraLearner):
    def loss(self, steps, batch_size):
        packed = self.pack(steps)
        logp = self.policy.completion_logprobs(packed)
        adv = packed.tensor([s.reward for s in steps], dtype=logp.dtype)
        return -(adv * self.sequence_logprobs(packed, logp)).sum() / batch_size, {}


def make(tiny_path, shared, **kw):
    options = LearnerOptions(**{"device": "cpu", "lora": {"rank": 4, "alpha": 8}, "prefix_sharing": shared, **kw})
    learner = Plain(options, tiny_path, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # LoRA B away from zero, the same in both
        for p in learner.params:
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.05)
    return learner


def compare(tiny_path, steps, dtype="float64", rtol=1e-10, grad_rtol=1e-6, **kw):
    """Logprobs within ``rtol``; every LoRA gradient within ``grad_rtol`` of the largest. Qwen3's
    RMSNorm computes in float32, so where steps share a node the shared path sums their
    gradients before the norm's backward and rounds that sum at float32 precision (measured:
    6e-8 relative on a self-play batch, 6e-15 between two padded runs)."""
    out = []
    for shared in (False, True):
        L = make(tiny_path, shared, dtype=dtype, **kw)
        logp = L.policy.completion_logprobs(L.pack(steps))
        L.update(Batch(steps=steps, learner_version=0))
        grads = {n: p.grad.clone() for n, p in L.trainable().items()}
        out.append((logp.detach(), grads, L))
    (lp0, g0, _), (lp1, g1, shared) = out
    assert torch.allclose(lp1, lp0, rtol=rtol, atol=0)
    scale = max(float(g.abs().max()) for g in g0.values())
    assert scale > 0
    for name in g0:
        assert float((g1[name] - g0[name]).abs().max()) <= grad_rtol * scale, name
    return shared


@pytest.fixture(scope="module")
def kuhn_steps(tiny_path):
    from transformers import AutoTokenizer

    return self_play_steps(AutoTokenizer.from_pretrained(tiny_path), "KuhnPoker-v0-train", n=24)


LAYOUTS = pytest.mark.parametrize("layout", ["masks", "segments"])


@LAYOUTS
def test_a_real_self_play_batch_gives_the_padded_logprobs_and_gradients(tiny_path, kuhn_steps, layout):
    learner = compare(tiny_path, kuhn_steps, mini_batch_size=8, prefix_budget=1024, prefix_layout=layout)
    assert learner.layout == layout
    assert learner.counts["forward_tokens"] < 0.5 * learner.counts["sequence_tokens"]


@LAYOUTS
def test_float32_within_1e_5(tiny_path, kuhn_steps, layout):
    compare(tiny_path, kuhn_steps, dtype="float32", rtol=1e-5, grad_rtol=1e-5, mini_batch_size=24, prefix_layout=layout)


def step(prompt, completion, reward, game=0):
    t = Turn(player_id=0, observation="o", prompt="p", prompt_token_ids=prompt, completion="c",
             completion_token_ids=completion, action="[x]", format_ok=True)
    return Step(env_id="E", game_idx=game, player_id=0, turn_index=0, num_turns=1, turn=t, final_reward=reward, reward=reward)


def duplicate_steps():
    return [step([5, 6, 7, 8], [9, 10], 1.0), step([5, 6, 7, 8], [9, 10], 0.5), step([5, 6, 7, 8], [9, 11], -1.0)]


def nested_steps():
    """A prompt that is a prefix of another step's prompt + completion."""
    return [step([5, 6, 7], [8, 9], 1.0), step([5, 6, 7, 8, 9, 12], [13], -1.0), step([5, 6], [7], 0.3)]


@LAYOUTS
def test_corner_cases_give_the_padded_gradients(tiny_path, layout):
    rng = random.Random(0)
    nothing_shared = [step([3 + i] + [rng.randrange(3, 300) for _ in range(6)], [rng.randrange(3, 300)], (-1) ** i) for i in range(5)]
    duplicates, nested = duplicate_steps(), nested_steps()
    compare(tiny_path, nothing_shared, grad_rtol=1e-12, prefix_layout=layout)  # nothing summed at a shared node: float64 throughout
    for steps in (duplicates, nested):
        compare(tiny_path, steps, prefix_layout=layout)
    compare(tiny_path, nested + duplicates, max_train_len=5, mini_batch_size=2, prefix_layout=layout)  # truncation, several chunks


def test_gradient_checkpointing_with_shared_rows(tiny_path, kuhn_steps, caplog):
    assert compare(tiny_path, kuhn_steps[:12], gradient_checkpointing=True, mini_batch_size=6).layouts.candidates == ["masks"]
    with caplog.at_level("WARNING", logger="unstable.hf"):  # transformers drops the KV cache under checkpointing
        L = compare(tiny_path, kuhn_steps[:12], gradient_checkpointing=True, mini_batch_size=6, prefix_layout="segments")
    assert L.layout == "masks"
    said = [r.getMessage() for r in caplog.records if "prefix_layout" in r.getMessage()]
    assert len(said) == 1 and "gradient checkpointing" in said[0]  # the shared learner only: the padded one shares nothing


def test_metrics_report_forward_tokens_and_the_share(tiny_path, kuhn_steps):
    L = make(tiny_path, True, mini_batch_size=24)  # steps share only within a chunk
    m = L.update(Batch(steps=kuhn_steps, learner_version=0))
    total = sum(len(s.turn.prompt_token_ids) + len(s.turn.completion_token_ids) for s in kuhn_steps)
    assert m["forward_tokens"] < total and m["prefix_share"] == pytest.approx(1 - m["forward_tokens"] / total)
    P = make(tiny_path, False, mini_batch_size=24)
    m = P.update(Batch(steps=kuhn_steps, learner_version=0))
    assert m["forward_tokens"] == total and m["prefix_share"] == 0.0


def test_a_model_that_takes_no_4d_mask_falls_back_to_padded_rows_with_one_log_line(tiny_path, kuhn_steps, monkeypatch, caplog):
    from types import SimpleNamespace

    from unstable_hf.policy import Policy

    fake = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2")))
    fake.attention = Policy.attention.fget(fake)
    assert "flash_attention_2" in Policy.prefix_sharing_unsupported(fake)
    monkeypatch.setattr(Policy, "prefix_sharing_unsupported", lambda self: "attention implementation 'x' takes no 4D attention mask")
    with caplog.at_level("WARNING", logger="unstable.hf"):
        L = make(tiny_path, True, mini_batch_size=24)
    assert [r.getMessage() for r in caplog.records if "prefix sharing is off" in r.getMessage()] == [
        f"prefix sharing is off for {tiny_path}: attention implementation 'x' takes no 4D attention mask; "
        "the learner forwards one padded row per step"]
    m = L.update(Batch(steps=kuhn_steps, learner_version=0))
    assert m["prefix_share"] == 0.0


def test_flex_attention_on_a_cpu_keeps_dense_masks_with_one_log_line(tiny_path, kuhn_steps, caplog):
    with caplog.at_level("WARNING", logger="unstable.hf"):
        L = make(tiny_path, True, mini_batch_size=24, prefix_attention="flex")
    said = [r.getMessage() for r in caplog.records if "prefix_attention" in r.getMessage()]
    assert len(said) == 1 and "CUDA only" in said[0]
    assert not L.block_mask and L.shared and L.policy.attention == "sdpa"
    assert L.update(Batch(steps=kuhn_steps, learner_version=0))["prefix_share"] > 0.5


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: FlexAttention trains on CUDA only")


@cuda
def test_flex_block_masks_give_the_padded_logprobs_and_gradients_on_cuda(tiny_path, kuhn_steps):
    # the reference is the padded path with the model's own attention (sdpa); float32 throughout
    learner = compare(tiny_path, kuhn_steps, dtype="float32", rtol=1e-5, grad_rtol=1e-5, device="cuda",
                      mini_batch_size=8, prefix_budget=1024, prefix_attention="flex")
    assert learner.block_mask and learner.policy.attention == "flex_attention"  # the last pack had a block mask
    assert learner.counts["forward_tokens"] < 0.5 * learner.counts["sequence_tokens"]
    rng = random.Random(0)
    nothing_shared = [step([3 + i] + [rng.randrange(3, 300) for _ in range(6)], [rng.randrange(3, 300)], 1.0) for i in range(4)]
    learner.policy.completion_logprobs(learner.pack(nothing_shared))  # packed padded: the model's own attention
    assert learner.policy.attention == "sdpa"


@cuda
def test_flex_block_masks_on_corner_cases_and_with_gradient_checkpointing(tiny_path, kuhn_steps):
    duplicates, nested = duplicate_steps(), nested_steps()
    kw = {"dtype": "float32", "rtol": 1e-5, "grad_rtol": 1e-5, "device": "cuda"}
    for steps in (duplicates, nested):
        assert compare(tiny_path, steps, prefix_attention="flex", **kw).block_mask
    compare(tiny_path, nested + duplicates, max_train_len=5, mini_batch_size=2, prefix_attention="flex", **kw)
    compare(tiny_path, kuhn_steps[:12], gradient_checkpointing=True, mini_batch_size=6, prefix_attention="flex", **kw)
    assert not compare(tiny_path, kuhn_steps[:12], **kw).block_mask  # auto: dense masks on CUDA too


@pytest.fixture
def float64_norms(monkeypatch):
    """Qwen3's RMSNorm with its float32 round trip taken out (the model's code, not the
    learner's): what is left of the gradient difference is the shared path's own."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    monkeypatch.setattr(Qwen3RMSNorm, "forward", forward)


@LAYOUTS
def test_with_float64_norms_every_gradient_is_within_1e_10(tiny_path, kuhn_steps, float64_norms, layout):
    duplicates, nested = duplicate_steps(), nested_steps()
    tight = {"rtol": 1e-10, "grad_rtol": 1e-10, "prefix_layout": layout}
    compare(tiny_path, kuhn_steps, mini_batch_size=8, prefix_budget=1024, **tight)
    compare(tiny_path, duplicates, **tight)
    compare(tiny_path, nested, **tight)
    compare(tiny_path, nested + duplicates, max_train_len=5, mini_batch_size=2, **tight)
    compare(tiny_path, kuhn_steps[:12], gradient_checkpointing=True, mini_batch_size=6, **tight)


# -- chunks cut by tokens (``mini_batch_tokens``) ---------------------------------------------------
def test_token_runs_count_shared_tokens_once_padded_rows_by_their_longest_and_cap_steps():
    from unstable_hf.prefix import shared_with_previous, token_runs

    lengths, shared = [10, 10, 10, 30, 5], [0, 8, 8, 0, 0]
    # 10 + 2 + 2 fit in 20; the 30-token step is a run of its own; 30 + 5 would not fit
    assert token_runs(lengths, shared, 20) == [(0, 3, 14), (3, 4, 30), (4, 5, 5)]
    assert token_runs(lengths, shared, 20, max_steps=2) == [(0, 2, 12), (2, 3, 10), (3, 4, 30), (4, 5, 5)]
    # padded: 2 rows x 10 = 20 fit in 25, 3 x 10 do not, nor 2 x 30
    assert token_runs(lengths, None, 25) == [(0, 2, 20), (2, 3, 10), (3, 4, 30), (4, 5, 5)]
    assert token_runs([4, 9], None, 18) == [(0, 2, 18)]  # the longest sets a padded run's width
    assert shared_with_previous([[1, 2, 3], [1, 2, 4], [5]]) == [0, 2, 0]


def test_token_runs_on_random_sorted_batches_are_tries_within_the_budget_and_greedy():
    from unstable_hf.prefix import Trie, sorted_ids, token_runs

    rng = random.Random(0)
    for _ in range(300):
        seqs = [[rng.randrange(3) for _ in range(rng.randrange(1, 12))] for _ in range(rng.randrange(1, 14))]
        _order, ids, shared = sorted_ids(seqs)
        budget, max_steps = rng.randrange(1, 40), rng.choice([None, 1, 2, 5])
        runs = token_runs([len(x) for x in ids], shared, budget, max_steps)
        assert [r[0] for r in runs] == [0] + [r[1] for r in runs[:-1]] and runs[-1][1] == len(ids)
        for start, end, tokens in runs:
            trie = Trie()
            for x in ids[start:end]:
                trie.insert(x)
            assert tokens == trie.size  # exactly the trie's nodes
            assert tokens <= budget or end - start == 1
            assert max_steps is None or end - start <= max_steps
            if end < len(ids):  # greedy: the next step would have broken a limit
                assert tokens + len(ids[end]) - shared[end] > budget or end - start == max_steps


def trie_tokens(steps):
    return len({tuple(s.ids[:k]) for s in sequences(steps) for k in range(1, len(s.ids) + 1)})


def padded_tokens(steps):
    return len(steps) * max(len(s.ids) for s in sequences(steps))


def test_chunks_cut_by_tokens_keep_the_padded_gradients_and_share_more_steps_a_chunk(tiny_path, kuhn_steps):
    budget = 900
    shared = compare(tiny_path, kuhn_steps, mini_batch_size=24, mini_batch_tokens=budget)  # both learners cut by tokens
    chunks = shared.chunks(sorted(kuhn_steps, key=lambda s: s.turn.prompt_token_ids + s.turn.completion_token_ids))
    assert len(chunks) > 2 and sum(chunks, []) == sorted(kuhn_steps, key=lambda s: s.turn.prompt_token_ids + s.turn.completion_token_ids)
    assert all(trie_tokens(c) <= budget or len(c) == 1 for c in chunks)
    padded = make(tiny_path, False, mini_batch_size=24, mini_batch_tokens=budget)
    padded_chunks = padded.chunks(kuhn_steps)
    assert sum(padded_chunks, []) == kuhn_steps and all(padded_tokens(c) <= budget or len(c) == 1 for c in padded_chunks)
    assert len(padded_chunks) > len(chunks)  # sharing fits more steps in the same tokens
    assert [len(c) for c in make(tiny_path, True, mini_batch_size=10).chunks(kuhn_steps)] == [10, 10, 4]  # no budget: by count
