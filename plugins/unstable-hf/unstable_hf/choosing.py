"""inference `hf` answering one of the texts a request offers (``request.choices``: the legal
actions' answers under ``collection.answers = "choice"``).

Each text is scored in its tokenization followed by the tokenizer's end-of-text token, the one
token sequence the backend writes for it and the learner's row for it trains on
(``completion_probabilities`` scores the same where the model has one end id; where its folder
declares more, it sums the text's probability over them, ``scoring.py``); one is drawn with those probabilities renormalised over the texts, from
the request's own seed, so the answer does not depend on the batch (a nucleus, ``top_p``, that
leaves every choice out gives each probability 0: then they are drawn alike). Every candidate of every
request in the call is forwarded in one batch. The completion carries the drawn text's token ids
and each token's logprob under the tempered distribution (as ``generate`` reports them), and every
choice's token ids and probability: the learner's batch gets a row for each
(``unstable_core.expand_choices``), which makes its step the gradient of the renormalised policy.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from .scoring import completion_targets, target_logprobs


class Drawn(NamedTuple):
    text: str
    token_ids: list[int]
    logprobs: list[float]  # of each token, under the tempered distribution
    choice_token_ids: list[list[int]]  # every choice the backend can write, the drawn one included
    choice_probabilities: list[float]  # each one's, renormalised over them


def choose(model: Any, tokenizer: Any, prompts: list[list[int]], choices: list[list[str]], seeds: list[int],
           max_tokens: int, temperature: float, top_p: float,
           serving: Callable[[list[int]], AbstractContextManager[Any]]) -> list[Drawn]:
    """What was drawn for each prompt among its choices; ``serving(request index of each row)`` is
    the context the batch is forwarded in (its adapters)."""
    targets = [completion_targets(tokenizer, texts, max_tokens) for texts in choices]
    rows = [(i, prompt, t) for i, (prompt, ts) in enumerate(zip(prompts, targets, strict=True)) for t in ts if t]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with serving([i for i, _, _ in rows]):
        scored = iter(target_logprobs(model, [(p, t) for _, p, t in rows], pad, temperature, top_p))
    drawn = []
    for texts, ts, seed in zip(choices, targets, seeds, strict=True):
        candidates = [(text, t, *next(scored)) for text, t in zip(texts, ts, strict=True) if t]
        if not candidates:
            raise ValueError(f"none of the choices {texts!r} fits in max_tokens = {max_tokens} tokens")
        top = max(c[3] for c in candidates)
        weights = [math.exp(c[3] - top) if top > -math.inf else 1.0 for c in candidates]
        total = sum(weights)
        index = random.Random(seed).choices(range(len(candidates)), weights=weights)[0]
        text, ids, logprobs, _ = candidates[index]
        drawn.append(Drawn(text, ids, logprobs, [c[1] for c in candidates], [w / total for w in weights]))
    return drawn
