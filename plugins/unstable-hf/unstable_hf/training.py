"""The learner toolkit: what a learner on a LoRA causal LM needs besides its loss.

    from unstable_hf.training import LoraLearner

    class MyLearner(LoraLearner):
        def loss(self, steps, batch_size):
            packed = self.pack(steps)
            logp = self.policy.completion_logprobs(packed)          # [tokens], with grad
            per_step = packed.per_step(logp)                        # [steps]: sum over each completion
            advantages = packed.tensor([s.reward for s in steps])
            return -(advantages * per_step).sum() / batch_size, {}

* ``sequences(steps, max_train_len)``: each step's exact rollout token ids (never re-tokenized),
  truncated from the prompt's beginning; ``pack(seqs, device)``: right-padded tensors with the
  positions that predict completion tokens, the targets, each token's step and rollout logprob;
  ``pack_shared(seqs, device, budget)``: the same fields over prefix tries, every token the
  steps share forwarded once (``prefix.py``); ``pack_segments(seqs, device)``: the same fields
  over cached-prefix segments (``segments.py``).
* ``Policy``: the causal LM with a fresh LoRA adapter (from a model path, hub id or ``tiny:``
  spec), split into body and lm_head; ``completion_logprobs(packed, adapter=...)`` goes through
  the memory-bounded ``token_logprobs`` (the adapter off gives the frozen base policy's, for a KL
  term); ``save(directory, checkpoint)`` writes an adapter checkpoint atomically.
* ``LoraLearner``: owns the optimizers (AdamW over ``trainable()``), gradient accumulation over
  chunks of ``mini_batch_size`` steps and ``mini_batch_tokens`` tokens (cut along the prefix
  tries), clipping (the logged ``grad_norm`` is before clipping), ``version``, metrics,
  checkpoints and its ``state_dict`` (trainable weights, optimizers, torch RNG, version).
"""


from __future__ import annotations

import copy
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from unstable_core import Batch, Checkpoint, Step

from .data_parallel import Workers, on_cpu, shard, sum_gradients, sum_numbers, worker_rank
from .layout import LayoutChoice
from .logprob_gap import LogprobGap
from .options import LearnerOptions
from .packing import Packed, Sequence, pack, sequences
from .policy import Policy, hidden_states, split_body_and_head
from .prefix import attention_pair_weight, forward_cost, pack_shared, shared_with_previous, token_runs
from .segments import pack_segments
from .step_values import StepValues

__all__ = [
    "LoraLearner", "LearnerOptions", "Policy", "Packed", "Sequence", "hidden_states", "pack", "pack_segments", "pack_shared", "sequences",
    "split_body_and_head",
]

log = logging.getLogger("unstable.hf")


class LoraLearner:
    """Base of learners on a LoRA causal LM: subclass it and write ``loss``.

    ``update(batch)`` makes one optimizer step (``epochs()`` steps for a learner that reuses its
    batch): ``prepare(steps)`` once, the batch in
    ``chunks`` (``mini_batch_size`` steps, ``mini_batch_tokens`` tokens), ``loss(chunk,
    batch_size)`` each (so a loss divided by ``batch_size`` sums to the batch's mean), backward,
    the gradient norm clipped at ``grad_clip`` and logged before clipping, ``version`` + 1. Metrics: ``loss``, ``grad_norm``,
    ``advantage_mean``, ``train_tokens`` (completion tokens scored), ``forward_tokens`` (positions
    the loss's forwards computed), ``prefix_share`` (the share of the steps' tokens that prefix
    sharing did not recompute), ``prefix_segments`` (the share of chunks forwarded as
    cached-prefix segments), ``logprob_gap_mean`` / ``logprob_gap_max`` / ``logprob_gap_tokens`` (rollout
    vs learner logprobs at the first pass, on the steps this version played: ``logprob_gap.py``),
    ``learner_tokens_per_s``, ``update_s``, what ``prepare`` returned
    and the mean over chunks (of every pass) of every number ``loss`` reports. With ``prefix_layout = "auto"``
    the first chunks alternate between the two prefix-shared layouts, timed, and the faster is
    kept (``layout.py``)."""

    def __init__(self, options: LearnerOptions, model: str, seed: int = 0, causal_lm: Any = None) -> None:
        self.options = options
        self.base_model = model
        torch.manual_seed(seed)
        self.policy = Policy(model, options, causal_lm)
        self.model, self.device = self.policy.model, self.policy.device
        self.build_modules()
        self.params = list(self.trainable().values())
        self.optimizers = self.make_optimizers()
        self.optimizer = self.optimizers["policy"]
        self.version = 0
        self.epoch = self.chunk_index = 0  # the pass over the batch and the chunk that ``loss`` computes
        self.counts: Counter[str] = Counter()
        self.prepared = StepValues()
        self.logprob_gap = LogprobGap()  # rollout vs learner logprobs of the steps these weights played
        self.policy.observer = self.logprob_gap.observe
        self.pair_weight = attention_pair_weight(self.model.config)
        self.forward_cost = forward_cost(self.model.config)
        self.set_prefix_sharing(options.prefix_sharing)
        self.distributed = options.data_parallel > 1
        self.workers = Workers(self, model, seed) if self.distributed and worker_rank() is None else None

    def set_prefix_sharing(self, on: bool, layout: str | None = None) -> None:
        """Turn prefix sharing on (where the model takes it) or off; ``layout`` ('auto', 'masks'
        or 'segments', default the options' ``prefix_layout``) picks how shared steps are
        forwarded, ``prefix_attention`` the masks of the 'masks' layout."""
        why = self.policy.prefix_sharing_unsupported() if on else None
        if why is not None:
            on = False
            log.warning("prefix sharing is off for %s: %s; the learner forwards one padded row per step", self.base_model, why)
        self.shared = on
        layout = layout or self.options.prefix_layout
        layouts = ["masks", "segments"] if layout == "auto" else [layout]
        if on and self.options.gradient_checkpointing and "segments" in layouts:
            layouts = ["masks"]
            if layout == "segments":
                log.warning("prefix_layout 'segments' is off for %s: transformers drops the KV cache under gradient "
                            "checkpointing; prefix-shared steps use masks", self.base_model)
        self.layouts = LayoutChoice(layouts if on else ["padded"], model=self.base_model)
        self.layout = self.layouts.candidates[0]
        self.block_mask = False  # 'auto' = dense: block masks train on CUDA only and were no faster there (docs/performance.md)
        if on and self.options.prefix_attention == "flex":
            why = self.policy.flex_attention_unsupported()
            if why is None:
                self.block_mask = True
            else:
                log.warning("prefix_attention 'flex' is off for %s: %s; prefix-shared rows use dense masks", self.base_model, why)

    # -- what a subclass writes or changes --------------------------------------------------------
    def loss(self, steps: list[Step], batch_size: int) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss of these steps (a chunk of a batch of ``batch_size``) and numbers to log."""
        raise NotImplementedError

    def build_modules(self) -> None:
        """Build what the learner trains besides the policy (a critic), before the optimizers."""

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        """Named trainable parameters (saved in the state; default: the policy's LoRA weights)."""
        return {n: p for n, p in self.model.named_parameters() if p.requires_grad}

    def make_optimizer(self) -> torch.optim.Optimizer:
        """The policy's optimizer (AdamW over ``self.params`` at ``lr``)."""
        return torch.optim.AdamW(self.params, lr=self.options.lr, weight_decay=self.options.weight_decay)

    def make_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimizer by name; ``policy`` is required. Each is clipped at ``grad_clip`` and
        stepped once per update; the norm of ``policy`` is logged as ``grad_norm``, the others'
        as ``NAME_grad_norm``. Override to train a critic with its own optimizer."""
        return {"policy": self.make_optimizer()}

    def prepare(self, steps: list[Step]) -> dict[str, Any] | None:
        """Called once per update with the whole batch, before its chunks, without grad: compute
        what ``loss`` treats as constants (a critic's values, group advantages). A number
        returned is logged; a list (or 1-d tensor) of one value per step of ``steps``, in order,
        is a per-step value that ``loss`` reads with ``step_values(chunk, name)``.

        Data-parallel, every rank calls it with its shard of whole games (possibly none): a
        statistic over the batch (a mean, a variance) sums what each shard holds through
        ``batch_sums``, called the same number of times on every rank."""

    def prepare_batch(self, steps: list[Step]) -> dict[str, float]:
        """``prepare`` the batch (without grad, the model in eval mode: no LoRA dropout, so what it
        computes is the policy's and the critic's own values; the mode it found is restored for
        the passes): keep its per-step values for ``step_values``, return its numbers."""
        training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                return self.prepared.split(steps, self.prepare(steps) or {})
        finally:
            self.model.train(training)

    def batch_sums(self, values: list[float]) -> list[float]:
        """These numbers summed over the whole batch: data-parallel, each rank's (all-reduced in
        float64, every rank must call it with as many numbers); one learner's as they are. For
        ``prepare``: ``n, total = self.batch_sums([len(steps), sum(x)])`` is the batch's count
        and sum on every rank, so N ranks take the step one learner takes."""
        if self.distributed:
            return sum_numbers([float(v) for v in values], self.device)
        return [float(v) for v in values]

    def step_values(self, steps: list[Step], name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The per-step values ``name`` that ``prepare`` returned, for these steps (a chunk), in
        their order, as a tensor on the model's device; found by step (game, seat, turn)."""
        return torch.tensor(self.prepared.of(steps, name), dtype=dtype or self.policy.head.weight.dtype, device=self.device)

    def save_extra(self, folder: Path) -> None:
        """Write more into a checkpoint folder before it is renamed into place (a critic, say)."""

    # -- helpers for ``loss`` ----------------------------------------------------------------------
    def pack(self, steps: list[Step]) -> Packed:
        """The steps' rollout token ids as tensors on the model's device (``max_train_len``
        applied): prefix-shared (``prefix_sharing``, where the model takes it) in this chunk's
        ``layout`` ('masks' or 'segments': see ``prefix_layout``), else one padded row per step. The
        tokens that packs made by ``loss`` forward are counted in the update's metrics."""
        seqs = sequences(steps, self.options.max_train_len)
        if self.layout == "segments":
            packed = pack_segments(seqs, self.device, pair_weight=self.pair_weight, forward_cost=self.forward_cost)
        elif self.layout == "masks":
            packed = pack_shared(seqs, self.device, self.options.prefix_budget, dtype=self.policy.head.weight.dtype,
                                 pair_weight=0.0 if self.block_mask else self.pair_weight, block_mask=self.block_mask)
        else:
            packed = pack(seqs, self.device)
        self.logprob_gap.watch(packed, steps, self.version)
        self.counts["forward_tokens"] += packed.forward_tokens
        self.counts["sequence_tokens"] += packed.sequence_tokens
        return packed

    def chunks(self, steps: list[Step]) -> list[list[Step]]:
        """The batch, in its order, cut into the chunks one forward each takes: at most
        ``mini_batch_size`` steps and, with ``mini_batch_tokens``, at most that many tokens
        (each shared token once when prefix sharing is on: ``update`` has sorted the steps)."""
        size, budget = self.options.mini_batch_size, self.options.mini_batch_tokens
        if budget is None:
            return [steps[i : i + size] for i in range(0, len(steps), size)]
        ids = [s.ids for s in sequences(steps, self.options.max_train_len)]
        shared = shared_with_previous(ids) if self.shared else None
        return [steps[start:end] for start, end, _tokens in token_runs([len(x) for x in ids], shared, budget, size)]

    def sequence_logprobs(self, packed: Packed, per_token: torch.Tensor) -> torch.Tensor:
        """Each row's sum of ``per_token`` [N] over its completion, divided by the ``normalizer``:
        the constant ``max_generation_len`` (Dr. GRPO) or the row's token count. [B]"""
        if self.options.normalizer == "tokens":
            norm = packed.completion_lengths.to(per_token.dtype)
        else:
            norm = torch.full_like(packed.completion_lengths, self.options.max_generation_len, dtype=per_token.dtype)
        return packed.per_step(per_token) / norm

    # -- the update --------------------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, float]:
        start = time.perf_counter()
        steps = batch.steps
        if self.workers is not None:  # rank 0 of a data-parallel learner: a shard to every rank
            shards = shard(steps, self.options.data_parallel)
            self.workers.send([("update", (part, len(steps))) for part in shards[1:]])
            metrics = self.update_shard(shards[0], len(steps))
            self.workers.replies("updating")
        else:
            metrics = self.update_shard(steps, len(steps))
        elapsed = time.perf_counter() - start
        tokens = sum(len(s.completion) for s in sequences(steps, self.options.max_train_len))
        return {
            **metrics,
            "advantage_mean": sum(s.reward for s in steps) / len(steps),
            "train_tokens": float(tokens),
            "learner_tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
            "update_s": elapsed,
        }

    def epochs(self) -> int:
        """Optimizer steps an update takes over its batch (default 1). A learner that reuses a
        batch (PPO-style) returns more: each pass goes over the same chunks in the same layouts,
        ``self.epoch`` and ``self.chunk_index`` say which pass and chunk ``loss`` is computing,
        and the update's ``loss`` and ``grad_norm`` are the first pass's."""
        return 1

    def update_shard(self, steps: list[Step], batch_size: int) -> dict[str, float]:
        """The optimizer steps of one update from these steps, a shard of a batch of
        ``batch_size`` steps (the whole batch, unless data-parallel: then every rank's gradients
        are summed before each step, and so are the loss and token counts reported)."""
        if self.shared:  # neighbours share most: chunks cut along the tries
            steps = sorted(steps, key=lambda s: s.turn.prompt_token_ids + s.turn.completion_token_ids)
        self.model.train()
        prepared = self.prepare_batch(steps) if steps or self.distributed else {}  # every rank: batch_sums
        self.counts.clear()
        chunks = self.chunks(steps)
        layouts: list[str] = []
        sums: dict[str, float] = {}
        loss, norms, forward, sequence = 0.0, {}, 0.0, 0.0  # token counts: summed over ranks as floats
        for epoch in range(self.epochs()):
            self.epoch = epoch
            for optimizer in self.optimizers.values():
                optimizer.zero_grad(set_to_none=True)
            pass_loss = self.backward_pass(chunks, layouts, batch_size, sums)
            pass_norms = self.step_optimizers()
            if epoch == 0:  # the update reports its first pass: the loss of the batch as it came
                loss, norms = pass_loss, pass_norms
                forward, sequence = float(self.counts["forward_tokens"]), float(self.counts["sequence_tokens"])
        self.epoch = self.chunk_index = 0  # a later ``loss`` outside an update starts afresh
        if self.distributed:
            loss, forward, sequence = sum_numbers([loss, forward, sequence], self.device)
        gap = self.logprob_gap.metrics(self.distributed, self.device)
        self.model.eval()
        self.version += 1
        passes = max(1, len(chunks) * self.epochs())
        return {
            **{key: float(value) for key, value in prepared.items()},
            **{key: value / passes for key, value in sums.items()},
            **norms,
            **gap,
            "loss": loss,
            "forward_tokens": float(forward),
            "prefix_share": 1.0 - forward / max(1, sequence),
            "prefix_segments": layouts.count("segments") / max(1, len(chunks)),
        }

    def backward_pass(self, chunks: list[list[Step]], layouts: list[str], batch_size: int, sums: dict[str, float]) -> float:
        """One pass of ``loss`` and backward over the chunks; the first pass picks each chunk's
        layout (appended to ``layouts``) and times it, later passes reuse it. Adds the chunks'
        stats into ``sums``; returns the pass's loss."""
        total = 0.0
        for index, chunk in enumerate(chunks):
            self.chunk_index = index
            if self.epoch == 0:
                layouts.append(self.layouts.next())
            self.layout = layouts[index]
            chunk_start, tokens_before = time.perf_counter(), self.counts["sequence_tokens"]
            with self.logprob_gap.first_pass(self.epoch == 0):
                loss, stats = self.loss(chunk, batch_size)
            loss.backward()
            if self.epoch == 0:
                self.layouts.record(self.layout, time.perf_counter() - chunk_start, self.counts["sequence_tokens"] - tokens_before)
            total += float(loss.detach())
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value)
        return total

    def step_optimizers(self) -> dict[str, float]:
        """Sum the ranks' gradients (data-parallel), clip each optimizer's at ``grad_clip`` and
        step it; the norms before clipping."""
        if self.distributed:
            for optimizer in self.optimizers.values():
                sum_gradients([p for group in optimizer.param_groups for p in group["params"]])
        norms = {}
        for name, optimizer in self.optimizers.items():
            params = [p for group in optimizer.param_groups for p in group["params"]]
            norms["grad_norm" if name == "policy" else f"{name}_grad_norm"] = float(
                torch.nn.utils.clip_grad_norm_(params, self.options.grad_clip))
            optimizer.step()
        return norms

    # -- checkpoints and state ---------------------------------------------------------------------
    def save_checkpoint(self, directory: str, uid: str) -> Checkpoint:
        ckpt = Checkpoint(uid=uid, version=self.version, path=str(directory), base_model=self.base_model, created_at=time.time())
        return self.policy.save(directory, ckpt, extra=self.save_extra)

    def state_dict(self) -> dict[str, Any]:
        """Trainable weights, optimizer state, torch RNG and version: what resuming needs to take
        the next step exactly as an uninterrupted run would. Copies, not references: training
        may go on while a snapshot is written."""
        return {
            "version": self.version,
            "adapter": {n: p.detach().clone() for n, p in self.trainable().items()},
            "optimizers": {name: copy.deepcopy(optimizer.state_dict()) for name, optimizer in self.optimizers.items()},
            "torch_rng": torch.get_rng_state(),
            "prefix_layout": self.layouts.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        params = self.trainable()
        with torch.no_grad():
            for name, value in state["adapter"].items():
                params[name].copy_(value)
        for name, saved in state["optimizers"].items():  # JSON turned the integer keys into strings
            self.optimizers[name].load_state_dict({"state": {int(k): v for k, v in saved["state"].items()},
                                                   "param_groups": saved["param_groups"]})
        torch.set_rng_state(state["torch_rng"])
        if "prefix_layout" in state:  # snapshots before 2026-11-25 have none
            self.layouts.load_state_dict(state["prefix_layout"])
        self.version = int(state["version"])
        if self.workers is not None:  # every rank resumes from the same state
            self.workers.send([("load_state", on_cpu(state))] * (self.options.data_parallel - 1))
            self.workers.replies("loading a state")

    def close(self) -> None:
        """Stop a data-parallel learner's worker processes (they also stop with this process)."""
        if self.workers is not None:
            self.workers.close()
            self.workers = None
