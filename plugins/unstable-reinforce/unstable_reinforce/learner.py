"""The REINFORCE learner.

For each step of a batch: the exact token ids the policy saw and generated (prompt ids +
completion ids; text is never re-tokenized), prompt tokens masked out. The model body returns
hidden states; the completion-token logprobs come from ``unstable_hf.logprobs.token_logprobs``
(chunked, recomputing backward), so the lm_head is never applied to all positions at once.

    loss = - sum_i  A_i * sum_t logp(y_it) / norm_i  / batch_size

with ``norm_i`` the constant ``max_generation_len`` (Dr. GRPO) or the sequence's token count. With
``importance_sampling`` each token's logprob is weighted by the truncated ratio
``min(exp(logp - rollout_logp), is_cap)`` (detached). ``update`` makes exactly one optimizer step.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from unstable_core import Batch, Checkpoint, Step
from unstable_hf.loading import load_causal_lm, resolve_model_path, with_lora
from unstable_hf.logprobs import token_logprobs

from .options import ReinforceOptions


def split_body_and_head(causal_lm: Any) -> tuple[Any, Any]:
    """(the decoder that returns hidden states, the lm_head module) of a (peft-wrapped) causal LM."""
    base = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
    body = base.get_decoder() if hasattr(base, "get_decoder") else getattr(base, base.base_model_prefix)
    return body, base.get_output_embeddings()


class ReinforceLearner:
    def __init__(self, options: ReinforceOptions, model: str, seed: int = 0, causal_lm: Any = None) -> None:
        self.options = options
        self.base_model = model
        torch.manual_seed(seed)
        if causal_lm is None:
            causal_lm = load_causal_lm(resolve_model_path(model, options), options)
        self.model = with_lora(causal_lm, options.lora)
        if options.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
            self.model.enable_input_require_grads()
        self.body, self.head = split_body_and_head(self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=options.lr, weight_decay=options.weight_decay)
        self.device = next(self.model.parameters()).device
        self.version = 0

    # -- the loss ---------------------------------------------------------------------------------
    def _sequences(self, steps: list[Step]) -> list[tuple[list[int], list[int], list[float]]]:
        out = []
        for s in steps:
            prompt, completion = list(s.turn.prompt_token_ids), list(s.turn.completion_token_ids)
            if not completion:
                raise ValueError(f"step of game {s.game_idx} has no completion token ids: train on rollout ids only")
            old = list(s.turn.logprobs)
            limit = self.options.max_train_len
            if limit is not None and len(prompt) + len(completion) > limit:
                keep_prompt = max(1, limit - len(completion))
                prompt = prompt[-keep_prompt:]
                completion = completion[: limit - len(prompt)]
                old = old[: len(completion)]
            if not prompt:
                raise ValueError(f"step of game {s.game_idx} has no prompt token ids")
            out.append((prompt, completion, old))
        return out

    def sequence_logprobs(self, seqs: list[tuple[list[int], list[int], list[float]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(per-token logprobs [N], row of each token [N], rollout logprobs [N] (nan if unknown))."""
        width = max(len(p) + len(c) for p, c, _ in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        attn = torch.zeros((len(seqs), width), dtype=torch.long)
        pred = torch.zeros((len(seqs), width), dtype=torch.bool)  # positions predicting a completion token
        targets, rows, old = [], [], []
        for i, (p, c, o) in enumerate(seqs):  # right padding
            seq = p + c
            ids[i, : len(seq)] = torch.tensor(seq)
            attn[i, : len(seq)] = 1
            pred[i, len(p) - 1 : len(seq) - 1] = True
            targets += c
            rows += [i] * len(c)
            old += o + [float("nan")] * (len(c) - len(o))
        hidden = self.body(input_ids=ids.to(self.device), attention_mask=attn.to(self.device)).last_hidden_state
        logp = token_logprobs(
            hidden[pred.to(self.device)], self.head.weight, torch.tensor(targets, device=self.device),
            chunk_size=self.options.logprob_chunk_size, temperature=self.options.temperature,
        )
        return logp, torch.tensor(rows, device=self.device), torch.tensor(old, device=self.device)

    def loss(self, steps: list[Step], batch_size: int) -> tuple[torch.Tensor, dict[str, float]]:
        seqs = self._sequences(steps)
        logp, rows, old = self.sequence_logprobs(seqs)
        weight = torch.ones_like(logp)
        stats: dict[str, float] = {}
        if self.options.importance_sampling:
            known = ~torch.isnan(old)
            ratio = torch.exp((logp.detach() - torch.where(known, old, logp.detach())).clamp(max=20))
            weight = torch.clamp(ratio, max=self.options.is_cap)
            stats["is_ratio_mean"] = float(ratio.mean())
            stats["is_clipped_frac"] = float((ratio > self.options.is_cap).float().mean())
        per_seq = torch.zeros(len(seqs), device=logp.device, dtype=logp.dtype).index_add(0, rows, weight * logp)
        if self.options.normalizer == "tokens":
            norm = torch.tensor([len(c) for _, c, _ in seqs], device=logp.device, dtype=logp.dtype)
        else:
            norm = torch.full((len(seqs),), float(self.options.max_generation_len), device=logp.device, dtype=logp.dtype)
        adv = torch.tensor([s.reward for s in steps], device=logp.device, dtype=logp.dtype)
        loss = -(adv * per_seq / norm).sum() / batch_size
        stats["tokens"] = float(logp.numel())
        stats["logp_mean"] = float(logp.detach().mean()) if logp.numel() else 0.0
        return loss, stats

    # -- the update -------------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        start = time.perf_counter()
        steps = batch.steps
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        tokens = 0.0
        extra: dict[str, float] = {}
        mb = self.options.mini_batch_size
        for i in range(0, len(steps), mb):
            loss, stats = self.loss(steps[i : i + mb], len(steps))
            loss.backward()
            total += float(loss.detach())
            tokens += stats.pop("tokens")
            extra = stats
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.options.grad_clip))
        self.optimizer.step()
        self.model.eval()
        self.version += 1
        elapsed = time.perf_counter() - start
        return {
            "loss": total,
            "grad_norm": grad_norm,
            "advantage_mean": sum(s.reward for s in steps) / len(steps),
            "train_tokens": tokens,
            "learner_tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
            "update_s": elapsed,
            **extra,
        }

    # -- state (for resume) -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Adapter weights, optimizer state, torch RNG and version: what resuming needs to take
        the next step exactly as an uninterrupted run would."""
        return {
            "version": self.version,
            "adapter": {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad},
            "optimizer": self.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, value in state["adapter"].items():
                params[name].copy_(value)
        saved = state["optimizer"]  # JSON turned its integer keys into strings
        self.optimizer.load_state_dict({"state": {int(k): v for k, v in saved["state"].items()}, "param_groups": saved["param_groups"]})
        torch.set_rng_state(state["torch_rng"])
        self.version = int(state["version"])

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self, directory: str, uid: str) -> Checkpoint:
        """Write the adapter (safetensors) into a temp folder beside `directory`, then rename:
        a killed run never leaves a half-written checkpoint."""
        final = Path(directory)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            self.model.save_pretrained(tmp, safe_serialization=True)
            ckpt = Checkpoint(uid=uid, version=self.version, path=str(final), base_model=self.base_model, created_at=time.time())
            (tmp / "unstable_checkpoint.json").write_text(json.dumps(ckpt.model_dump(mode="json"), indent=2))
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return ckpt
