"""The name transformers gives a model's KV cache: ``cache`` in its forward and ``generate``
arguments and in its outputs since transformers renamed ``past_key_values`` (the old name warns
and is due to go in 5.40), ``past_key_values`` before (the vLLM environment pins an older
transformers). Read off the installed version's output records, once."""

from __future__ import annotations

import dataclasses
import functools


@functools.cache
def cache_name() -> str:
    from transformers.modeling_outputs import CausalLMOutputWithPast

    fields = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in fields else "past_key_values"
