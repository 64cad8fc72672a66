"""The critic: a value head reading the last prompt token's hidden state (where the action
starts), on a second LoRA adapter of the policy's backbone or on a separate model.

UnstableBaselines' critic reads position 0, which under causal attention sees only the
template's first token: its V(s) cannot depend on the state. Here V(s) reads the position whose
hidden state has attended to the whole prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from unstable_hf.loading import load_causal_lm, lora_config, resolve_model_path, with_lora
from unstable_hf.policy import checkpoint_activations
from unstable_hf.training import Packed, Policy, hidden_states, split_body_and_head

from .options import A2COptions

ADAPTER = "critic"


class Critic:
    def __init__(self, policy: Policy, options: A2COptions, model: str) -> None:
        lora = options.critic_lora or options.lora
        if options.critic == "adapter":
            self.model = policy.model
            self.model.add_adapter(ADAPTER, lora_config(lora))
            self.adapter: str | None = ADAPTER
            self.body = policy.body
        else:
            causal = load_causal_lm(resolve_model_path(options.critic_model or model, options), options)
            self.model = with_lora(causal, lora)
            if options.gradient_checkpointing:  # as the policy's
                checkpoint_activations(self.model)
            self.adapter = None
            self.body = split_body_and_head(self.model)[0]
        self.policy_model = policy.model
        self._unfreeze()
        width = split_body_and_head(self.model)[1].weight.shape[1]
        self.head = torch.nn.Linear(width, 1, dtype=policy.head.weight.dtype, device=policy.device)
        torch.nn.init.zeros_(self.head.weight)  # V(s) = 0 until it learns
        torch.nn.init.zeros_(self.head.bias)

    def named_parameters(self) -> dict[str, torch.nn.Parameter]:
        """The critic's trainable weights: its LoRA adapter and the value head."""
        if self.adapter is not None:
            named = {n: p for n, p in self.model.named_parameters() if f".{self.adapter}." in n}
        else:
            named = {f"critic.{n}": p for n, p in self.model.named_parameters() if p.requires_grad}
        return {**named, **{f"value_head.{n}": p for n, p in self.head.named_parameters()}}

    def values(self, packed: Packed) -> torch.Tensor:
        """V(s) of each row [B]: the value head on the hidden state of its last prompt token. A
        separate critic model is in the policy's mode (training: LoRA dropout, checkpointing)."""
        if self.adapter is None:
            self.model.train(self.policy_model.training)
        with self._active():
            hidden = hidden_states(self.body, packed)
        return self.head(packed.at(hidden, packed.last_prompt_index)).squeeze(-1)

    def save(self, folder: Path) -> None:
        """``critic/`` (the adapter) and ``value_head.safetensors`` into a checkpoint folder. With
        the shared backbone the policy's ``save_pretrained`` already wrote ``critic/``."""
        from safetensors.torch import save_file

        if self.adapter is None:
            self.model.save_pretrained(folder / ADAPTER, safe_serialization=True)
        save_file({n: p.detach().contiguous() for n, p in self.head.state_dict().items()}, str(folder / "value_head.safetensors"))

    @contextmanager
    def _active(self) -> Iterator[None]:
        if self.adapter is None:
            yield
            return
        self.model.set_adapter(self.adapter)
        try:
            yield
        finally:
            self.model.set_adapter("default")
            self._unfreeze()

    def _unfreeze(self) -> None:
        # peft's set_adapter freezes the inactive adapter; both adapters train (each by its own optimizer)
        for name, p in self.model.named_parameters():
            if "lora_" in name:
                p.requires_grad_(True)

