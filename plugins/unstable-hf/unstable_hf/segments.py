"""Cached-prefix segments: the other prefix-shared layout.

The steps (sorted by their ids) are cut into groups of neighbours; a group's common prefix is
forwarded once with ``use_cache=True`` and its suffixes as one right-padded batch against that
cache repeated once per suffix. Gradients reach the prefix through the cached keys and values.
Attention stays the model's own causal attention over a padding mask (no 4D mask: the suffixes
attend to P + S keys each, not to a whole packed row), at the price of two forwards a group.
Which groups: the cut of the sorted steps whose modelled cost (tokens computed, attention pairs
weighted by ``pair_weight``, a fixed cost per forward) is least, by dynamic programming.
Transformers drops the cache under gradient checkpointing, so this layout needs it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .cache_name import cache_name
from .packing import Packed, Sequence, completion_fields
from .prefix import sorted_steps


@dataclass
class Segment:
    """One group: its common prefix [1, P] (None: no prefix forward), its suffixes [G, S], their
    padding mask over prefix + suffix [G, P + S] and their position ids [G, S]."""

    prefix: torch.Tensor | None
    ids: torch.Tensor
    attention: torch.Tensor
    position_ids: torch.Tensor

    @property
    def prefix_len(self) -> int:
        return 0 if self.prefix is None else self.prefix.shape[1]

    @property
    def flat_len(self) -> int:
        """Positions this group adds to the flat hidden states."""
        return self.prefix_len + self.ids.numel()


def group_cost(prefix: int, rows: int, suffix: int, pair_weight: float, forward_cost: float) -> float:
    """Modelled cost, in tokens, of a group: its prefix forwarded once (if any), ``rows``
    suffixes padded to ``suffix`` tokens against it, the attention pairs of both weighted by
    ``pair_weight``, ``forward_cost`` a forward call."""
    pairs = prefix * prefix / 2 + rows * suffix * (prefix + suffix / 2)
    return prefix + rows * suffix + pair_weight * pairs + (2 if prefix else 1) * forward_cost


def plan(lengths: list[int], shared: list[int], pair_weight: float, forward_cost: float) -> list[tuple[int, int, int]]:
    """(start, end, prefix length) of each group of the sorted steps (``shared[k]``: the ids step
    k shares with step k - 1), the cut of least modelled cost (dynamic programming, O(n^2)). The
    common prefix of a run of sorted sequences is the least of its neighbours' common prefixes;
    a group's prefix stops one token short of its shortest step, so every suffix has a token."""
    n = len(lengths)
    best = [0.0] + [float("inf")] * n
    back = [(0, 0)] * (n + 1)
    for j in range(1, n + 1):
        common, shortest, longest = lengths[j - 1], lengths[j - 1], lengths[j - 1]
        for i in range(j - 1, -1, -1):  # the group i..j-1, growing to the left
            if i < j - 1:
                common = min(common, shared[i + 1])
                shortest, longest = min(shortest, lengths[i]), max(longest, lengths[i])
            prefix = min(common, shortest - 1) if i < j - 1 else 0
            cost = best[i] + group_cost(prefix, j - i, longest - prefix, pair_weight, forward_cost)
            if cost < best[j]:
                best[j], back[j] = cost, (i, prefix)
    groups, j = [], n
    while j:
        i, prefix = back[j]
        groups.append((i, j, prefix))
        j = i
    return groups[::-1]


def pack_segments(seqs: list[Sequence], device: Any = "cpu", pair_weight: float = 0.0, forward_cost: float = 0.0) -> Packed:
    """The steps as cached-prefix segments, with the same fields as ``pack``: positions index the
    flat hidden states that ``hidden_states`` returns ([1, T, H]: each group's prefix, then its
    suffix rows)."""
    order, ids, shared = sorted_steps(seqs)
    lengths = [len(x) for x in ids]
    segments: list[Segment] = []
    where: list[tuple[int, int, int]] = [(0, 0, 0)] * len(seqs)  # per step: its group's flat start, prefix length, row start
    base = forward_tokens = 0
    for start, end, prefix in plan(lengths, shared, pair_weight, forward_cost):
        width = max(lengths[start:end]) - prefix
        rows = end - start
        suffix = torch.zeros((rows, width), dtype=torch.long)
        attention = torch.zeros((rows, prefix + width), dtype=torch.long)
        for r, k in enumerate(range(start, end)):
            suffix[r, : lengths[k] - prefix] = torch.tensor(ids[k][prefix:])
            attention[r, : lengths[k]] = 1
            where[order[k]] = (base, prefix, base + prefix + r * width)
        positions = torch.arange(prefix, prefix + width).repeat(rows, 1)
        head = torch.tensor([ids[start][:prefix]], device=device) if prefix else None
        segments.append(Segment(head, suffix.to(device), attention.to(device), positions.to(device)))
        base += segments[-1].flat_len
        forward_tokens += prefix + sum(lengths[start:end]) - rows * prefix  # padding excluded

    def flat(step: int, position: int) -> int:
        group, prefix, row = where[step]
        return group + position if position < prefix else row + position - prefix

    predict, last_prompt = [], []
    for i, s in enumerate(seqs):
        predict += [flat(i, p) for p in range(len(s.prompt) - 1, len(s.ids) - 1)]
        last_prompt.append(flat(i, len(s.prompt) - 1))
    return Packed(
        ids=torch.zeros((1, base), dtype=torch.long, device=device), attention=None, position_ids=None,
        predict_index=torch.tensor(predict, device=device), last_prompt_index=torch.tensor(last_prompt, device=device),
        forward_tokens=forward_tokens,
        sequence_tokens=sum(lengths), segments=segments, **completion_fields(seqs, device),
    )


def segment_hidden_states(body: Any, segments: list[Segment]) -> torch.Tensor:
    """The decoder's last hidden states of every group, flat: [1, T, H]."""
    out = []
    for seg in segments:
        cache = None
        if seg.prefix is not None:
            head = body(input_ids=seg.prefix, use_cache=True)
            out.append(head.last_hidden_state[0])
            cache = getattr(head, cache_name())
            cache.batch_repeat_interleave(seg.ids.shape[0])
        tail = body(input_ids=seg.ids, attention_mask=seg.attention, position_ids=seg.position_ids,
                    use_cache=cache is not None, **{cache_name(): cache})
        out.append(tail.last_hidden_state.flatten(0, 1))
    return torch.cat(out)[None]
