"""Prefix-shared packing: every token a batch shares is computed once.

In self-play every turn's prompt repeats the chat template, the rules and the game so far, and a
batch holds many turns of the same games. ``pack_shared`` puts the steps (sorted by their ids)
into prefix tries, one trie per row of at most ``budget`` tokens: two steps share a node only
where their ids agree from position 0, so a shared node has the same past in both and hence the
same hidden state. Each node's position id is its depth, and the row's additive attention mask
lets a node see only its ancestors and itself: the forward computes, for every step, exactly
what a padded row of its own would, with transformers' public 4D-mask and position-id inputs
(no model code forked). Attention stays dense per row, so the budget bounds its cost.
"""

from __future__ import annotations

from typing import Any

import torch

from .packing import Packed, Sequence, completion_fields, pack


class _Trie:
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.children: list[dict[int, int]] = []
        self.roots: dict[int, int] = {}

    @property
    def size(self) -> int:
        return len(self.tokens)

    def missing(self, ids: list[int]) -> int:
        """Nodes that inserting ``ids`` would add."""
        level, matched = self.roots, 0
        for token in ids:
            node = level.get(token)
            if node is None:
                break
            matched += 1
            level = self.children[node]
        return len(ids) - matched

    def insert(self, ids: list[int]) -> list[int]:
        """The node of each position of ``ids`` (created where missing; parents come first)."""
        nodes, level, parent = [], self.roots, -1
        for depth, token in enumerate(ids):
            node = level.get(token)
            if node is None:
                node = level[token] = len(self.tokens)
                self.tokens.append(token)
                self.parents.append(parent)
                self.depths.append(depth)
                self.children.append({})
            nodes.append(node)
            level, parent = self.children[node], node
        return nodes


def attention_pair_weight(config: Any, overhead: float = 2.5) -> float:
    """What one (query, key) pair of dense attention costs, in units of the rest of one token's
    work (projections and MLP), from a transformers config; 0 when the config does not say.
    ``overhead``: masked attention on a CPU measured about 2.5 times its multiply-adds' share."""
    hidden = getattr(config, "hidden_size", None)
    heads = getattr(config, "num_attention_heads", None)
    mlp = getattr(config, "intermediate_size", None)
    if not (hidden and heads and mlp):
        return 0.0
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    token = hidden * (2 * heads * head_dim + 2 * kv) + 3 * hidden * mlp
    return overhead * 2 * heads * head_dim / token


def _cost(tokens: int, weight: float) -> float:
    return tokens + weight * tokens * tokens


def _place(seqs: list[Sequence], budget: int, pair_weight: float) -> tuple[list[_Trie], list[tuple[int, list[int]]]]:
    """Tries (rows) and, per step, its row and the node of each of its positions."""
    tries: list[_Trie] = []
    placed: list[tuple[int, list[int]]] = [(0, [])] * len(seqs)
    for i in sorted(range(len(seqs)), key=lambda i: seqs[i].ids):
        ids = seqs[i].ids
        joins = False
        if tries:
            size, new = tries[-1].size, tries[-1].missing(ids)
            joins = size + new <= budget and _cost(size + new, pair_weight) - _cost(size, pair_weight) <= _cost(len(ids), pair_weight)
        if not joins:
            tries.append(_Trie())
        placed[i] = (len(tries) - 1, tries[-1].insert(ids))
    return tries, placed


def _visibility(trie: _Trie, chains: list[list[int]]) -> torch.Tensor:
    """[size, size]: node a sees node b where b is an ancestor of a or a itself. Each step's
    nodes are the chain of ancestors of its last node."""
    if len(chains) == 1:  # one step in the row: plain causal attention
        return torch.ones(trie.size, trie.size, dtype=torch.bool).tril()
    depth = torch.tensor(trie.depths)
    ancestors = torch.full((trie.size, int(depth.max()) + 1), -1, dtype=torch.long)  # [node, depth] -> ancestor
    for nodes in chains:
        chain = torch.tensor(nodes)
        below = torch.ones(len(nodes), len(nodes), dtype=torch.bool).tril()
        ancestors[chain, : len(nodes)] = torch.where(below, chain.expand(len(nodes), -1), -1)
    return ancestors[:, depth] == torch.arange(trie.size)


def pack_shared(seqs: list[Sequence], device: Any = "cpu", budget: int = 2048, dtype: torch.dtype = torch.float32,
                pair_weight: float = 0.0) -> Packed:
    """The steps in prefix tries of at most ``budget`` nodes a row (a longer step gets a row of
    its own), with the same fields as ``pack``; ``attention`` is an additive [R, 1, W, W] mask
    in ``dtype``. Attention is dense within a row, so a step joins the current row only when
    that costs less than a row of its own (``pair_weight``: see ``attention_pair_weight``); a
    batch where no row holds two steps is packed as ``pack`` does."""
    tries, placed = _place(seqs, budget, pair_weight)
    chains: list[list[list[int]]] = [[] for _ in tries]
    for r, nodes in placed:
        chains[r].append(nodes)
    if all(len(c) == 1 for c in chains):  # nothing shared: padded rows, no 4D mask to build or apply
        return pack(seqs, device)
    width = max(t.size for t in tries)
    ids = torch.zeros((len(tries), width), dtype=torch.long)
    positions = torch.zeros((len(tries), width), dtype=torch.long)
    sees = torch.eye(width, dtype=torch.bool).repeat(len(tries), 1, 1)  # padding sees itself only (no row of -inf)
    for r, trie in enumerate(tries):
        ids[r, : trie.size] = torch.tensor(trie.tokens)
        positions[r, : trie.size] = torch.tensor(trie.depths)
        sees[r, : trie.size, : trie.size] = _visibility(trie, chains[r])
    mask = torch.zeros(sees.shape, dtype=dtype).masked_fill_(~sees, torch.finfo(dtype).min).unsqueeze(1)
    predict, last_prompt = [], []
    for s, (r, nodes) in zip(seqs, placed):
        base = r * width
        predict += [base + nodes[p] for p in range(len(s.prompt) - 1, len(s.ids) - 1)]
        last_prompt.append(base + nodes[len(s.prompt) - 1])
    return Packed(
        ids=ids.to(device), attention=mask.to(device), position_ids=positions.to(device),
        predict_index=torch.tensor(predict, device=device), last_prompt_index=torch.tensor(last_prompt, device=device),
        forward_tokens=sum(t.size for t in tries), sequence_tokens=sum(len(s.ids) for s in seqs),
        **completion_fields(seqs, device),
    )
