"""Sampling in which every request draws from its own seed, whatever batch it is served in.

``transformers``' own sampling draws the tokens of a whole batch from one random stream, so a
request's completion depends on which requests shared its batch and in which order. Here a
logits processor, run last, draws each row's token with that row's ``torch.Generator``
(temperature and top-p applied) and leaves only that token possible; generation then runs
greedily and picks it.

Nothing else shapes the distribution: ``generate`` is given a clean ``GenerationConfig``
(``generation_config``) and the model's own, read from its folder's ``generation_config.json``,
is replaced by one that carries only the special token ids (``clean_generation_config``), so the
repetition penalty, top-k or temperature a real checkpoint's folder ships never becomes a logits
processor run before this one. What such a folder says is named once in the log as not applied
(``folder_sampling``).
Its end-of-sequence ids are kept, with the tokenizer's: generation stops at each (``end_ids``).
"""

from __future__ import annotations

from typing import Any

import torch


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``probs`` with everything outside each row's top-p nucleus set to zero (the most likely
    token always stays)."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


class PerRequestSampler:
    """A ``LogitsProcessor``: row ``i`` samples from ``Generator(seeds[i])``. It also keeps each
    drawn token's logprob under the tempered distribution (before top-p), a ``[B]`` tensor per
    generated position (``logprobs()``), so that generation need not keep every position's
    ``[B, V]`` logits (``output_logits``) until it ends."""

    def __init__(self, seeds: list[int], temperature: float, top_p: float) -> None:
        self.seeds = [int(s) for s in seeds]
        self.generators: list[torch.Generator] = []
        self.temperature, self.top_p = temperature, top_p
        self.chosen_logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: Any, scores: torch.Tensor) -> torch.Tensor:
        # draws on the scores' device: copying a 150k-token vocabulary to the CPU at every
        # generated token made GPU generation CPU-bound
        if not self.generators:
            self.generators = [torch.Generator(device=scores.device).manual_seed(s) for s in self.seeds]
        tempered = scores.float() / self.temperature
        probs = nucleus(torch.softmax(tempered, dim=-1), self.top_p)
        chosen = torch.stack([torch.multinomial(row, 1, generator=g) for row, g in zip(probs, self.generators)])
        self.chosen_logprobs.append(torch.log_softmax(tempered, dim=-1).gather(-1, chosen)[:, 0])
        return torch.full_like(scores, float("-inf")).scatter(-1, chosen, 0.0)

    def logprobs(self) -> torch.Tensor:
        """``[B, T]``: the logprob of the token drawn at each of the ``T`` positions so far."""
        return torch.stack(self.chosen_logprobs, dim=1)


#: the fields of a ``GenerationConfig`` that change which token is drawn, each with the value
#: under which it changes nothing (temperature and top_p: the run's own options)
NEUTRAL: dict[str, Any] = {
    "top_k": 0, "min_p": 0.0, "top_h": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "min_length": 0, "min_new_tokens": 0,
    "suppress_tokens": None, "begin_suppress_tokens": None, "sequence_bias": None, "forced_bos_token_id": None,
    "forced_eos_token_id": None, "exponential_decay_length_penalty": None, "renormalize_logits": False,
    "guidance_scale": 1.0, "num_beams": 1, "num_beam_groups": 1, "diversity_penalty": 0.0, "penalty_alpha": None,
    "dola_layers": None, "watermarking_config": None,
}


def folder_sampling(generation_config: Any, temperature: float, top_p: float) -> dict[str, Any]:
    """The sampling fields of a model's ``generation_config`` (its folder's
    ``generation_config.json``) that differ from what the run samples with: ``temperature`` and
    ``top_p`` against the run's options, every other field of ``NEUTRAL`` against its neutral
    value. None where a field is unset."""
    if generation_config is None:
        return {}
    run = {**NEUTRAL, "temperature": temperature, "top_p": top_p}
    found = {}
    for field, neutral in run.items():
        value = getattr(generation_config, field, None)
        if value is None or value == neutral or (not value and not neutral):  # [] or 0 where None is neutral
            continue
        found[field] = value
    return found


def end_ids(tokenizer_eos: Any, folder_eos: Any) -> list[int]:
    """Every id that ends a completion: the tokenizer's ``eos`` first, then each of ``folder_eos``,
    the ``eos_token_id`` (one id or a list) of the model's ``generation_config`` (read from its
    folder's ``generation_config.json``: a Gemma-2-it
    folder lists ``<eos>`` and ``<end_of_turn>``, the turn end its chat template writes, while its
    tokenizer's eos is ``<eos>``; Qwen2.5-Instruct lists ``<|im_end|>`` and ``<|endoftext|>``).
    Taken from the folder on purpose: where a completion ends is what the checkpoint was trained
    to write, not a sampling option, and stopping at it changes no token's probability."""
    ids: list[int] = []
    for value in [tokenizer_eos, *(folder_eos if isinstance(folder_eos, list | tuple) else [folder_eos])]:
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    return ids


def clean_generation_config(pad_token_id: Any, eos_token_id: Any, bos_token_id: Any = None) -> Any:
    """A ``GenerationConfig`` with only the special token ids (``eos_token_id``: one id or all of
    ``end_ids``): a model's ``generation_config`` replaced by it has nothing of its folder's
    sampling fields left for ``generate`` to merge into a call's."""
    from transformers import GenerationConfig

    return GenerationConfig(pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=bos_token_id)


def generation_config(max_new_tokens: int, pad_token_id: Any, eos_token_id: Any) -> Any:
    """What every ``generate`` call of the backend is given: greedy over what ``PerRequestSampler``
    leaves possible, ``max_new_tokens``, the end ids (``end_ids``: a row stops at the first) and
    padding id, a dict back."""
    from transformers import GenerationConfig

    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=pad_token_id,
                            eos_token_id=eos_token_id, return_dict_in_generate=True)
