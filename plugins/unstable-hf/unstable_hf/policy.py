"""The policy a learner trains: a causal LM with a fresh LoRA adapter, split into body and
lm_head, with memory-bounded completion logprobs and atomic adapter checkpoints."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from unstable_core import Checkpoint

from .loading import load_causal_lm, resolve_model_path, with_lora
from .logprobs import token_logprobs
from .options import LearnerOptions
from .packing import Packed
from .segments import segment_hidden_states


def split_body_and_head(causal_lm: Any) -> tuple[Any, Any]:
    """(the decoder that returns hidden states, the lm_head module) of a (peft-wrapped) causal LM."""
    base = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
    body = base.get_decoder() if hasattr(base, "get_decoder") else getattr(base, base.base_model_prefix)
    return body, base.get_output_embeddings()


def final_logit_softcap(config: Any) -> float | None:
    """The cap ``c`` of a model whose forward softcaps its logits, ``c * tanh(z / c)`` (Gemma 2:
    ``final_logit_softcapping``), or None; read from the text config of a multimodal one."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    cap = getattr(text, "final_logit_softcapping", None)
    return float(cap) if cap else None


_own_attention: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def _attention_for(body: Any, packed: Packed) -> None:
    """A FlexAttention block mask needs the ``flex_attention`` implementation; every other pack
    runs with the model's own (switched back through transformers' ``set_attn_implementation``)."""
    from torch.nn.attention.flex_attention import BlockMask

    current = getattr(body.config, "_attn_implementation", None)
    if isinstance(packed.attention, BlockMask):
        if current != "flex_attention":
            _own_attention[body] = current
            body.set_attn_implementation("flex_attention")
    elif body in _own_attention and current == "flex_attention":
        body.set_attn_implementation(_own_attention.pop(body))


def hidden_states(body: Any, packed: Packed) -> torch.Tensor:
    """A decoder's last hidden states [R, W, H] for packed rows (padded or prefix-shared: the
    mask and position ids come with them); [1, T, H] for cached-prefix segments."""
    _attention_for(body, packed)
    if packed.segments is not None:
        return segment_hidden_states(body, packed.segments)
    return body(input_ids=packed.ids, attention_mask=packed.attention, position_ids=packed.position_ids).last_hidden_state


class _AdaptersAtForward:
    """The ``context_fn`` of activation checkpointing on a peft model: each checkpointed call
    notes every adapter layer's active adapters and whether adapters are off, and its
    recomputation in backward runs under those, whichever adapter is active then (a critic
    adapter switched back to the policy's before backward, the adapters off for a reference)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.key: tuple[str, ...] = ()
        self.layers: list[Any] = []

    def _layers(self) -> list[Any]:
        key = tuple(getattr(self.model, "peft_config", {}))
        if key != self.key or not self.layers:  # adapter layers appear as adapters are added
            self.key = key
            self.layers = [m for m in self.model.modules() if hasattr(m, "_active_adapter") and hasattr(m, "_disable_adapters")]
        return self.layers

    def __call__(self) -> tuple[Any, Any]:
        layers = self._layers()
        return contextlib.nullcontext(), _AdapterState(layers, [(m._active_adapter, m._disable_adapters) for m in layers])


class _AdapterState:
    """Set adapter layers' (active adapters, off) for a block, then put back what was there;
    ``requires_grad`` is left alone (peft's ``set_adapter`` would change it)."""

    def __init__(self, layers: list[Any], state: list[tuple[Any, bool]]) -> None:
        self.layers, self.state = layers, state
        self.saved: list[list[tuple[Any, bool]]] = []

    def __enter__(self) -> None:
        self.saved.append([(m._active_adapter, m._disable_adapters) for m in self.layers])
        for m, (active, off) in zip(self.layers, self.state):
            m._active_adapter, m._disable_adapters = active, off

    def __exit__(self, *exc: object) -> None:
        for m, (active, off) in zip(self.layers, self.saved.pop()):
            m._active_adapter, m._disable_adapters = active, off


def checkpoint_activations(model: Any) -> None:
    """Gradient checkpointing on a (peft) causal LM: non-reentrant, and each decoder layer's
    recomputation in backward under the adapters its forward ran with (``_AdaptersAtForward``),
    so that a learner may switch adapters between its forwards and the backward."""
    # renamed in transformers 5.2x; the old name goes in v6
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable({"use_reentrant": False, "context_fn": _AdaptersAtForward(model)})
    model.enable_input_require_grads()


class Policy:
    """A causal LM with a fresh LoRA adapter, split into body and lm_head."""

    def __init__(self, model: str, options: LearnerOptions, causal_lm: Any = None) -> None:
        self.options = options
        self.base_model = model
        if causal_lm is None:
            causal_lm = load_causal_lm(resolve_model_path(model, options), options)
        self.model = with_lora(causal_lm, options.lora)
        if options.gradient_checkpointing:
            checkpoint_activations(self.model)
        self.body, self.head = split_body_and_head(self.model)
        self.softcap = final_logit_softcap(self.model.config)
        self.device = next(self.model.parameters()).device
        self.observer: Callable[[Packed, torch.Tensor], None] | None = None  # sees the policy's logprobs of each pack

    def hidden_states(self, packed: Packed) -> torch.Tensor:
        """The body's last hidden states [R, W, H] (with whichever adapter is active)."""
        return hidden_states(self.body, packed)

    @property
    def attention(self) -> str:
        """The model's attention implementation ('sdpa', 'eager', 'flex_attention', ...)."""
        return getattr(self.model.config, "_attn_implementation", None) or "eager"

    def prefix_sharing_unsupported(self) -> str | None:
        """Why this model cannot take prefix-shared rows (a 4D attention mask and position ids),
        or None. Flash-attention kernels take no arbitrary mask."""
        if self.attention not in ("sdpa", "eager", "flex_attention"):
            return f"attention implementation {self.attention!r} takes no 4D attention mask"
        return None

    def flex_attention_unsupported(self) -> str | None:
        """Why prefix-shared rows cannot use FlexAttention block masks here, or None (the body
        switches to ``flex_attention`` for block-masked packs only)."""
        if self.device.type != "cuda":
            return f"FlexAttention trains on CUDA only (no backward on {self.device.type} in torch {torch.__version__})"
        own = self.attention
        try:
            self.body.set_attn_implementation("flex_attention")
            switched = self.attention == "flex_attention"
            self.body.set_attn_implementation(own)
        except Exception as e:  # an old torch or transformers, a model without the attention interface
            return f"transformers could not switch the model to flex_attention: {e}"
        return None if switched else "the model does not let its attention implementation be switched"

    def completion_logprobs(self, packed: Packed, hidden: torch.Tensor | None = None, adapter: bool = True) -> torch.Tensor:
        """Logprob of every completion token [N] at the options' temperature, memory-bounded, the
        model's final logit softcap applied as its own forward applies it (Gemma 2).
        ``adapter=False``: under the frozen base model, without grad (``hidden`` is ignored).
        The policy's (``adapter=True``) go to ``observer`` too (the learner's logprob gap)."""
        if not adapter:
            with torch.no_grad(), self.model.disable_adapter():
                observer, self.observer = self.observer, None
                try:
                    return self.completion_logprobs(packed, self.hidden_states(packed))
                finally:
                    self.observer = observer
        if hidden is None:
            hidden = self.hidden_states(packed)
        logp = token_logprobs(packed.at(hidden, packed.predict_index), self.head.weight, packed.targets,
                              chunk_size=self.options.logprob_chunk_size, temperature=self.options.temperature,
                              softcap=self.softcap)
        if self.observer is not None:
            self.observer(packed, logp)
        return logp

    def save(self, directory: str, checkpoint: Checkpoint, extra: Any = None) -> Checkpoint:
        """Write the adapter (safetensors) and ``unstable_checkpoint.json`` into a temporary
        folder beside ``directory``, then rename it: a killed run never leaves a half-written
        checkpoint. ``extra(folder)`` may write more files into it first."""
        final = Path(directory)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            self.model.save_pretrained(tmp, safe_serialization=True)
            if extra is not None:
                extra(tmp)
            (tmp / "unstable_checkpoint.json").write_text(json.dumps(checkpoint.model_dump(mode="json"), indent=2))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return checkpoint
