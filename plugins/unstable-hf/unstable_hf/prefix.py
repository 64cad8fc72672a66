"""Prefix-shared packing: every token a batch shares is computed once.

In self-play every turn's prompt repeats the chat template, the rules and the game so far, and a
batch holds many turns of the same games. ``pack_shared`` puts the steps (sorted by their ids)
into prefix tries, one trie per row of at most ``budget`` tokens: two steps share a node only
where their ids agree from position 0, so a shared node has the same past in both and hence the
same hidden state. Each node's position id is its depth, and the row's additive attention mask
lets a node see only its ancestors and itself: the forward computes, for every step, exactly
what a padded row of its own would, with transformers' public 4D-mask and position-id inputs
(no model code forked). With additive masks attention is dense per row, so rows stay narrow
enough; with FlexAttention block masks (CUDA) it skips the blocks a row's tokens do not see.
"""

from __future__ import annotations

from typing import Any

import torch

from .packing import Packed, Sequence, completion_fields, pack


def _common(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    i = 0
    while a[i] == b[i]:
        i += 1
    return i


class Trie:
    """A prefix trie that takes its sequences in sorted order. Each sequence then shares with the
    trie exactly its common prefix with the sequence inserted before it, its new nodes extend that
    path as one chain, and the nodes come in preorder: the subtree of a node is the contiguous run
    of nodes from it up to its ``subtree_ends`` entry."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.depths: list[int] = []
        self._last_ids: list[int] = []
        self._last_nodes: list[int] = []

    @property
    def size(self) -> int:
        return len(self.tokens)

    def missing(self, ids: list[int]) -> int:
        """Nodes that inserting ``ids`` would add."""
        return len(ids) - _common(self._last_ids, ids)

    def insert(self, ids: list[int]) -> list[int]:
        """The node of each position of ``ids``, created where missing. ``ids`` must not sort
        before the sequence inserted last."""
        if ids < self._last_ids:
            raise ValueError("sequences must be inserted in sorted order")
        shared = _common(self._last_ids, ids)
        start = len(self.tokens)
        self.tokens += ids[shared:]
        self.depths += range(shared, len(ids))
        nodes = self._last_nodes[:shared] + list(range(start, len(self.tokens)))
        self._last_ids, self._last_nodes = ids, nodes
        return nodes

    def subtree_ends(self) -> list[int]:
        """For each node, the index after the last node of its subtree (preorder: the next node
        at its depth or above)."""
        ends, open_nodes, depths = [self.size] * self.size, list[int](), self.depths
        for node, depth in enumerate(depths):
            while open_nodes and depths[open_nodes[-1]] >= depth:
                ends[open_nodes.pop()] = node
            open_nodes.append(node)
        return ends


def _token_work(config: Any) -> tuple[float, float]:
    """(multiply-adds of one token's projections and MLP in one layer, of one attention pair in one
    layer) from a transformers config; (0, 0) when the config does not say."""
    hidden = getattr(config, "hidden_size", None)
    heads = getattr(config, "num_attention_heads", None)
    mlp = getattr(config, "intermediate_size", None)
    if not (hidden and heads and mlp):
        return 0.0, 0.0
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    return hidden * (2 * heads * head_dim + 2 * kv) + 3 * hidden * mlp, 2 * heads * head_dim


def attention_pair_weight(config: Any, overhead: float = 2.5) -> float:
    """What one (query, key) pair of dense attention costs, in units of the rest of one token's
    work (projections and MLP), from a transformers config; 0 when the config does not say.
    ``overhead``: masked attention on a CPU measured about 2.5 times its multiply-adds' share."""
    token, pair = _token_work(config)
    return overhead * pair / token if token else 0.0


def forward_cost(config: Any, fixed: float = 5e7) -> float:
    """What one more forward call costs, in tokens: a fixed ``fixed`` multiply-adds' worth a layer
    (about 200 tokens of the kuhn-tiny model on a CPU, 3 of a Qwen3-0.6B-shaped one); 0 when the
    config does not say."""
    token, _pair = _token_work(config)
    return fixed / token if token else 0.0


def sorted_ids(seqs: list[list[int]]) -> tuple[list[int], list[list[int]], list[int]]:
    """Id lists sorted, so that neighbours share the most: (their order, the sorted lists, for
    each the ids it shares with the one before it)."""
    order = sorted(range(len(seqs)), key=lambda i: seqs[i])
    ids = [seqs[i] for i in order]
    return order, ids, shared_with_previous(ids)


def shared_with_previous(ids: list[list[int]]) -> list[int]:
    """For each id list, how many ids it shares from position 0 with the one before it."""
    return [0] + [_common(ids[k - 1], ids[k]) for k in range(1, len(ids))]


def sorted_steps(seqs: list[Sequence]) -> tuple[list[int], list[list[int]], list[int]]:
    """The steps sorted by their ids (``sorted_ids`` of their ids)."""
    return sorted_ids([s.ids for s in seqs])


def token_runs(lengths: list[int], shared: list[int] | None, max_tokens: float,
               max_steps: int | None = None) -> list[tuple[int, int, int]]:
    """Greedy runs of consecutive steps: (start, end, tokens) each. A step joins the run before
    it while the run stays within ``max_tokens`` tokens and ``max_steps`` steps; a step longer
    than ``max_tokens`` is a run of its own. With ``shared`` (``shared[k]``: ids step k shares
    with step k - 1) a run counts each token its steps share once, as a prefix trie holds them
    (exactly the trie's size when the steps are sorted, at most it otherwise); without (None),
    a run of R steps counts R x its longest, as padded rows do."""
    runs: list[tuple[int, int, int]] = []
    widest = 0
    for k, length in enumerate(lengths):
        if runs:
            start, _end, tokens = runs[-1]
            grown = tokens + length - shared[k] if shared is not None else (k - start + 1) * max(widest, length)
            if grown <= max_tokens and (max_steps is None or k - start < max_steps):
                runs[-1] = (start, k + 1, grown)
                widest = max(widest, length)
                continue
        runs.append((k, k + 1, length))
        widest = length
    return runs


def split_rows(lengths: list[int], shared: list[int], width: int) -> list[int]:
    """Greedy rows over sorted steps: each row's node count (``token_runs`` within ``width``)."""
    return [tokens for _start, _end, tokens in token_runs(lengths, shared, width)]


def row_width(lengths: list[int], shared: list[int], budget: int, pair_weight: float) -> int:
    """The most nodes a row of several steps may hold, at most ``budget``, that makes the forward
    cheapest. Rows are padded to the widest, so R rows of width W cost about
    R x (W + pair_weight x W^2): wider rows share more (fewer repeated prefixes), narrower ones
    pay less for dense attention. Tried: 0 (a row per step), every multiple of 64 below the
    budget, and the budget."""
    best, best_cost = 0, float("inf")
    for width in (0, *range(64, budget, 64), budget):
        rows = split_rows(lengths, shared, width)
        widest = max(rows)
        cost = len(rows) * (widest + pair_weight * widest * widest)
        if cost < best_cost:
            best, best_cost = width, cost
    return best


def place_sequences(seqs: list[Sequence], budget: int, pair_weight: float) -> tuple[list[Trie], list[tuple[int, list[int]]]]:
    """Tries (rows) and, per step, its row and the node of each of its positions. The steps go in
    sorted by their ids, so that neighbours share the most, filling rows up to the cheapest width."""
    order, ids, shared = sorted_steps(seqs)
    width = row_width([len(x) for x in ids], shared, budget, pair_weight)
    tries: list[Trie] = []
    placed: list[tuple[int, list[int]]] = [(0, [])] * len(seqs)
    for i, step_ids in zip(order, ids):
        if not tries or tries[-1].size + tries[-1].missing(step_ids) > width:
            tries.append(Trie())
        placed[i] = (len(tries) - 1, tries[-1].insert(step_ids))
    return tries, placed


def visibility_mask(trie: Trie) -> torch.Tensor:
    """[size, size]: node a sees node b where b is an ancestor of a or a itself, i.e. where a lies
    in b's subtree, the run of nodes from b to its subtree's end."""
    node = torch.arange(trie.size)
    ends = torch.tensor(trie.subtree_ends())
    return (node[:, None] < ends[None, :]).tril_()  # tril: b <= a


def _dense_mask(tries: list[Trie], width: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive [R, 1, W, W] mask: 0 where a node sees another, the dtype's minimum elsewhere."""
    mask = torch.full((len(tries), width, width), torch.finfo(dtype).min, dtype=dtype)
    for r, trie in enumerate(tries):
        n = trie.size
        mask[r, :n, :n].masked_fill_(visibility_mask(trie), 0.0)
        padding = torch.arange(n, width)
        mask[r, padding, padding] = 0.0  # padding sees itself only (no row of -inf)
    return mask.unsqueeze(1)


def _block_mask(tries: list[Trie], width: int, device: Any) -> Any:
    """A FlexAttention ``BlockMask`` of the same visibility: query q sees key k where
    ``k <= q < end[k]`` (padding: end = itself + 1). Its kernels skip every block of keys that no
    query of the block sees, so attention costs about what the steps' own paths do."""
    from torch.nn.attention.flex_attention import create_block_mask

    ends = torch.arange(1, width + 1).repeat(len(tries), 1)  # padding sees itself only
    for r, trie in enumerate(tries):
        ends[r, : trie.size] = torch.tensor(trie.subtree_ends())
    ends = ends.to(device)

    def ancestors(b: Any, h: Any, q: Any, k: Any) -> Any:
        return (k <= q) & (q < ends[b, k])

    return create_block_mask(ancestors, len(tries), None, width, width, device=device)


def pack_shared(seqs: list[Sequence], device: Any = "cpu", budget: int = 2048, dtype: torch.dtype = torch.float32,
                pair_weight: float = 0.0, block_mask: bool = False) -> Packed:
    """The steps in prefix tries of at most ``budget`` nodes a row (a longer step gets a row of
    its own), with the same fields as ``pack``; ``attention`` is an additive [R, 1, W, W] mask
    in ``dtype``, or with ``block_mask`` a FlexAttention ``BlockMask`` (for a model whose
    attention implementation is ``flex_attention``). Dense attention costs W^2 a row, so rows
    are filled only up to the width that makes the whole forward cheapest (``pair_weight``: see
    ``attention_pair_weight``; 0 for block masks: the widest rows); a batch where no row holds two
    steps is packed as ``pack`` does."""
    tries, placed = place_sequences(seqs, budget, pair_weight)
    if len(tries) == len(seqs):  # nothing shared: padded rows, no 4D mask to build or apply
        return pack(seqs, device)
    width = max(t.size for t in tries)
    ids = torch.zeros((len(tries), width), dtype=torch.long)
    positions = torch.zeros((len(tries), width), dtype=torch.long)
    for r, trie in enumerate(tries):
        ids[r, : trie.size] = torch.tensor(trie.tokens)
        positions[r, : trie.size] = torch.tensor(trie.depths)
    mask = _block_mask(tries, width, device) if block_mask else _dense_mask(tries, width, dtype).to(device)
    predict, last_prompt = [], []
    for s, (r, nodes) in zip(seqs, placed):
        base = r * width
        predict += [base + nodes[p] for p in range(len(s.prompt) - 1, len(s.ids) - 1)]
        last_prompt.append(base + nodes[len(s.prompt) - 1])
    return Packed(
        ids=ids.to(device), attention=mask, position_ids=positions.to(device),
        predict_index=torch.tensor(predict, device=device), last_prompt_index=torch.tensor(last_prompt, device=device),
        forward_tokens=sum(t.size for t in tries), sequence_tokens=sum(len(s.ids) for s in seqs),
        **completion_fields(seqs, device),
    )
