"""The exact probability that the ``hf`` backend answers a given completion text: the product,
over the text's tokens and the end-of-text token, of each token's probability under the sampling
``generate`` does (temperature, then the top-p nucleus renormalised: ``sampling.py``).

A text is scored in the tokenization the tokenizer gives it (the one a warm-started model
writes); the mass of other tokenizations of the same text is not counted. A text of exactly
``max_tokens`` tokens needs no end-of-text token (generation stops there); a longer one cannot be
answered. The candidates of one prompt are forwarded together, right-padded, in one batch.
"""

from __future__ import annotations

from typing import Any


def completion_targets(tokenizer: Any, completions: list[str], max_tokens: int) -> list[list[int] | None]:
    """The token ids each text is generated as (end-of-text included), None when it cannot be."""
    targets: list[list[int] | None] = []
    for text in completions:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = ids if len(ids) == max_tokens else ids + [tokenizer.eos_token_id]
        targets.append(ids if len(ids) <= max_tokens else None)
    return targets


def sequence_probabilities(model: Any, prompt: list[int], targets: list[list[int] | None], pad_id: int,
                           temperature: float, top_p: float) -> list[float]:
    """Probability of each target continuing ``prompt`` under the sampling distribution."""
    import torch

    from .sampling import nucleus

    scored = [t for t in targets if t]
    if not scored:
        return [0.0] * len(targets)
    width = len(prompt) + max(len(t) for t in scored)
    rows = [prompt + t + [pad_id] * (width - len(prompt) - len(t)) for t in scored]
    mask = [[1] * (len(prompt) + len(t)) + [0] * (width - len(prompt) - len(t)) for t in scored]
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(rows, device=device), attention_mask=torch.tensor(mask, device=device)).logits
    logits = logits.double().cpu()
    rows_of = iter(range(len(scored)))
    out = []
    for target in targets:
        if not target:
            out.append(0.0)
            continue
        row = next(rows_of)
        p = 1.0
        for i, token in enumerate(target):
            probs = nucleus(torch.softmax(logits[row, len(prompt) + i - 1] / temperature, dim=-1), top_p)
            p *= float(probs[token] / probs.sum())
        out.append(p)
    return out
