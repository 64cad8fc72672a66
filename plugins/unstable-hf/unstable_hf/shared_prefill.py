"""Shared prompt prefixes in generation: a prefix that prompts of a batch share is prefilled once.

Self-play prompts repeat the chat template, the game's rules and the game so far: in a batch of
KuhnPoker turns every prompt of a seat begins with the same ~210 of its 250-410 tokens, and a
left-padded batch computes them once per prompt (prefill is ~80 % of the generation time of the
main job). Here the prompts, sorted by their ids, are cut into runs of neighbours; each run's
common prefix is forwarded once (one right-padded row per run, with ``use_cache=True``), the
cache rows are repeated for the run's prompts with transformers' public ``Cache.reorder_cache``,
and ``generate`` goes on from that cache over the rest of every prompt. A prompt's row is laid
out as [its run's prefix | padding | the rest of its prompt, left-padded] with the attention mask
zero over the padding; ``generate`` counts positions along the mask, so every token sees, at the
positions it would have alone, exactly the tokens it would see alone (logprobs equal to rounding;
tested in float64).

Which runs: for each candidate width of the rests, the fewest runs whose prefixes leave no rest
wider than it (greedy over the sorted prompts); the cut computing the fewest tokens (prefix rows
x the widest prefix + prompts x the widest rest) is kept when it computes fewer than one
left-padded batch (prompts x the longest prompt), otherwise the batch is served as before.

A batch of several adapters (``mixed_adapters.py``) shares prefixes only among the prompts of one
adapter (``adapters``): a prefix's cache holds keys and values its adapter computed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from .cache_name import cache_name
from .mixed_adapters import mixed
from .prefix import shared_with_previous


@dataclass
class Plan:
    """Per prompt (in the caller's order): the prefix row it continues and the length of the
    prefix it takes from it (0: none). ``prefixes`` holds each prefix row's ids."""

    row: list[int]
    cached: list[int]
    prefixes: list[list[int]]
    groups: list[int]  # each prefix row's group (its prompts')

    @property
    def prefix_width(self) -> int:
        return max(len(p) for p in self.prefixes)


@dataclass
class Prefill:
    """What ``generate`` is given: ``input_ids`` and ``attention_mask`` [B, W], the cache over
    their first columns (None: a plain left-padded batch), and the tokens the prefill computes."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    cache: Any
    computed: int


def _runs(lengths: list[int], shared: list[int], rest: int) -> list[tuple[int, int, int]]:
    """(start, end, prefix length) of the fewest runs of the sorted prompts whose common prefixes
    leave each prompt at most ``rest`` tokens. A prefix stops one token short of the run's
    shortest prompt (``generate`` needs a token of every prompt to go on from); a prompt alone
    that needs a prefix gets its own."""
    runs, k, n = [], 0, len(lengths)
    while k < n:
        need, common, shortest, j = lengths[k] - rest, lengths[k], lengths[k], k + 1
        while j < n:
            c, s, nd = min(common, shared[j]), min(shortest, lengths[j]), max(need, lengths[j] - rest)
            if min(c, s - 1) < nd:
                break
            common, shortest, need, j = c, s, nd, j + 1
        prefix = min(common, shortest - 1) if j > k + 1 else (lengths[k] - 1 if need > 0 else 0)
        runs.append((k, j, max(prefix, 0)))
        k = j
    return runs


def sorted_within(prompts: list[list[int]], groups: list[int]) -> tuple[list[int], list[list[int]], list[int]]:
    """``prefix.sorted_ids`` by group first: a prompt shares nothing with the one before it in another group."""
    order = sorted(range(len(prompts)), key=lambda i: (groups[i], prompts[i]))
    ids = [prompts[i] for i in order]
    shared = shared_with_previous(ids)
    return order, ids, [0 if k and groups[order[k]] != groups[order[k - 1]] else c for k, c in enumerate(shared)]


def plan(prompts: list[list[int]], groups: list[int] | None = None) -> Plan | None:
    """The runs that compute the fewest tokens, or None when a left-padded batch computes no
    more (nothing worth sharing). With ``groups``, a prefix is shared only within a group."""
    n = len(prompts)
    groups = groups or [0] * n
    order, ids, shared = sorted_within(prompts, groups)
    lengths = [len(p) for p in ids]
    best_cost, best = n * max(lengths), None
    widths = {lengths[k] - shared[k] for k in range(n)} | {lengths[k] - shared[k + 1] for k in range(n - 1)}
    for rest in sorted(w for w in widths if w >= 1):
        runs = _runs(lengths, shared, rest)
        cached = [p for _, _, p in runs if p]
        if not cached:
            continue
        widest_rest = max(lengths[k] - p for i, j, p in runs for k in range(i, j))
        cost = len(cached) * max(cached) + n * widest_rest
        if cost < best_cost:
            best_cost, best = cost, runs
    if best is None:
        return None
    row, cached, prefixes, prefix_groups = [0] * n, [0] * n, [], []
    for i, j, p in best:
        if p:
            prefixes.append(ids[i][:p])
            prefix_groups.append(groups[order[i]])
        for k in range(i, j):
            row[order[k]], cached[order[k]] = (len(prefixes) - 1 if p else 0), p
    return Plan(row=row, cached=cached, prefixes=prefixes, groups=prefix_groups)


def left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One left-padded batch and its attention mask."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def prefill(model: Any, prompts: list[list[int]], pad_id: int, device: Any, share: bool = True,
            adapters: list[str] | None = None) -> Prefill:
    """The inputs of ``generate`` for ``prompts``: with their shared prefixes already forwarded
    into a cache when ``share`` and that computes fewer tokens, else a left-padded batch.
    ``adapters``: each prompt's adapter in a batch of several (``mixed_adapters.mixed``)."""
    names = list(dict.fromkeys(adapters)) if adapters else []
    found = plan(prompts, [names.index(a) for a in adapters] if adapters else None) if share else None
    if found is None:
        ids, mask = left_padded(prompts, pad_id)
        return Prefill(ids.to(device), mask.to(device), None, ids.numel())
    width = found.prefix_width
    heads, head_mask = torch.full((len(found.prefixes), width), pad_id, dtype=torch.long), torch.zeros((len(found.prefixes), width), dtype=torch.long)
    for r, p in enumerate(found.prefixes):  # right-padded: a prefix's tokens sit at their own positions
        heads[r, : len(p)] = torch.tensor(p, dtype=torch.long)
        head_mask[r, : len(p)] = 1
    with mixed(model, [names[g] for g in found.groups]) if adapters else contextlib.nullcontext():
        out = model(input_ids=heads.to(device), attention_mask=head_mask.to(device), use_cache=True, logits_to_keep=1)
    cache = getattr(out, cache_name())
    cache.reorder_cache(torch.tensor(found.row, dtype=torch.long, device=device))
    rests, rest_mask = left_padded([p[c:] for p, c in zip(prompts, found.cached)], pad_id)
    ids = torch.cat([heads[found.row], rests], dim=1)
    sees = (torch.arange(width) < torch.tensor(found.cached)[:, None]).long()  # as much of its row's prefix as it shares
    mask = torch.cat([sees, rest_mask], dim=1)
    return Prefill(ids.to(device), mask.to(device), cache, heads.numel() + rests.numel())


def unsupported(model: Any) -> str | None:
    """Why shared prefixes cannot be used with this model (None: they can): a sliding window
    would count the padding inside a prompt as distance."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    kinds = set(getattr(config, "layer_types", None) or [])
    if kinds - {"full_attention"} or (not kinds and getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)):
        return f"{type(model).__name__} uses {'/'.join(sorted(kinds - {'full_attention'})) or 'sliding-window attention'}"
    return None
