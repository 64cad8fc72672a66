"""The exact probability that the ``hf`` backend answers a given completion text: the product,
over the text's tokens and an end-of-text token, of each token's probability under the sampling
``generate`` does (temperature, then the top-p nucleus renormalised: ``sampling.py``), summed over
the model's end ids (``sampling.end_ids``: generation stops at each, and the text leaves it out).

A text is scored in the tokenization the tokenizer gives it (the one a warm-started model
writes); the mass of other tokenizations of the same text is not counted. A text of exactly
``max_tokens`` tokens needs no end-of-text token (generation stops there); a longer one cannot be
answered. The candidates of one prompt are forwarded together, right-padded, in one batch.
"""

from __future__ import annotations

from typing import Any


def completion_targets(tokenizer: Any, completions: list[str], max_tokens: int, end: int | None = None) -> list[list[int] | None]:
    """The token ids each text is generated as, ending with ``end`` (the tokenizer's eos unless
    given), None when it cannot be."""
    end = tokenizer.eos_token_id if end is None else end
    targets: list[list[int] | None] = []
    for text in completions:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ids if len(ids) == max_tokens else ids + [end]
        targets.append(ids if len(ids) <= max_tokens else None)
    return targets


def ending_targets(tokenizer: Any, completions: list[str], max_tokens: int, ends: list[int]) -> list[list[list[int]]]:
    """Every token sequence each text is generated as: its tokens then one of ``ends`` (one
    sequence only for a text of exactly ``max_tokens`` tokens, none for a longer one)."""
    each = [completion_targets(tokenizer, completions, max_tokens, end) for end in ends]
    out: list[list[list[int]]] = []
    for alternatives in zip(*each, strict=True):
        distinct: list[list[int]] = []
        for t in alternatives:
            if t is not None and t not in distinct:
                distinct.append(t)
        out.append(distinct)
    return out


def sequence_probabilities(model: Any, prompt: list[int], targets: list[list[list[int]]], pad_id: int,
                           temperature: float, top_p: float) -> list[float]:
    """Probability of each text continuing ``prompt`` under the sampling distribution: the sum
    over the token sequences it is generated as (``ending_targets``)."""
    import math

    scored = iter(target_logprobs(model, [(prompt, t) for ts in targets for t in ts], pad_id, temperature, top_p))
    return [sum(math.exp(next(scored)[1]) for _ in ts) for ts in targets]


def target_logprobs(model: Any, pairs: list[tuple[list[int], list[int]]], pad_id: int, temperature: float,
                    top_p: float) -> list[tuple[list[float], float]]:
    """For each (prompt, target) pair, forwarded together right-padded in one batch: the logprob
    of each target token under the tempered distribution (what ``generate`` reports, before
    top-p) and the log probability of the whole target under the sampling distribution (top-p
    nucleus renormalised; -inf when a token lies outside it)."""
    import math

    import torch

    from .sampling import nucleus

    if not pairs:
        return []
    width = max(len(p) + len(t) for p, t in pairs)
    rows = [p + t + [pad_id] * (width - len(p) - len(t)) for p, t in pairs]
    mask = [[1] * (len(p) + len(t)) + [0] * (width - len(p) - len(t)) for p, t in pairs]
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(rows, device=device), attention_mask=torch.tensor(mask, device=device)).logits
    out = []
    for row, (prompt, target) in enumerate(pairs):
        positions = torch.arange(len(prompt) - 1, len(prompt) + len(target) - 1, device=device)
        tempered = torch.log_softmax(logits[row, positions].double() / temperature, dim=-1).cpu()
        ids = torch.tensor(target)
        token_logprobs = tempered.gather(1, ids[:, None])[:, 0]
        if top_p >= 1.0:
            total = float(token_logprobs.sum())
        else:
            probs = nucleus(tempered.exp(), top_p)
            chosen = probs.gather(1, ids[:, None])[:, 0] / probs.sum(dim=-1)
            total = float(chosen.log().sum()) if bool((chosen > 0).all()) else -math.inf
        out.append(([float(v) for v in token_logprobs], total))
    return out
