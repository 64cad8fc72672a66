"""The tiny model's supervised warm start: full fine-tuning on (prompt, [answer], weights) targets,
the loss on answer tokens and EOS only. A prompt with several answers is trained towards their
mixture (even, or by the weights given), its tokens computed once for all of them (a
prefix-shared row)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from unstable_core.progress import task

if TYPE_CHECKING:
    from .tiny import TinySpec

#: (prompt, answers, weights): one answer: imitate it; several: imitate their mixture, by the
#: weights (summing to 1) or, with None, evenly
Targets = list[tuple[str, list[str], list[float] | None]]


def supervised_warm_start(model: Any, tokenizer: Any, pairs: Targets, spec: TinySpec, log: Any = None) -> list[float]:
    """Full fine-tuning on (prompt, [completion], weights) targets: loss on completion tokens and EOS
    only; a prompt's completions share its weight by the weights given or equally (the
    cross-entropy to their mixture)."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed)
    encoded = []
    for prompt, completions, weights in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        cs = [tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for c in completions]
        encoded.append((p, cs, weights or [1.0 / len(cs)] * len(cs)))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.sft_lr, weight_decay=0.0)
    model.train()
    losses = []
    with task("warm start", total=spec.sft_steps) as progress:
        for step in range(spec.sft_steps):
            losses.append(_warm_start_step(model, tokenizer, encoded, spec, gen, opt))
            progress.advance()
            if log is not None and (step + 1) % 25 == 0:
                log(f"warm start step {step + 1}/{spec.sft_steps}: loss {sum(losses[-25:]) / 25:.3f}")
    model.eval()
    return losses


def _warm_start_step(model: Any, tokenizer: Any, encoded: list[tuple[list[int], list[list[int]], list[float]]],
                     spec: TinySpec, gen: Any, opt: Any) -> float:
    """One AdamW step on `sft_batch` random prompts, each with all its completions: the mean
    completion-token cross-entropy, each token weighted by its completion's weight.
    Several completions of a prompt share its tokens in one prefix-shared row (computed once)."""
    import torch

    idx = torch.randint(len(encoded), (spec.sft_batch,), generator=gen).tolist()
    batch = [encoded[i] for i in idx]
    # one answer each: the model's own loss, as before sft_targets existed. The weighted loss below is
    # the same number but summed in another order; this keeps such builds bit-identical, so cached
    # models and the runs measured on them stay valid under the same cache key.
    if all(len(cs) == 1 for _, cs, _ in batch):
        return _one_answer_step(model, tokenizer, [(p, cs[0]) for p, cs, _ in batch], opt)
    from .packing import Sequence
    from .prefix import pack_shared

    seqs = [Sequence(p, c, []) for p, cs, _ in batch for c in cs]
    weights = torch.tensor([w for _, _, ws in batch for w in ws])
    packed = pack_shared(seqs, budget=1024)
    logits = model(input_ids=packed.ids, attention_mask=packed.attention, position_ids=packed.position_ids).logits
    token_loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1)[packed.predict_index].float(), packed.targets, reduction="none")
    token_weights = weights[packed.rows]
    loss = (token_loss * token_weights).sum() / token_weights.sum()
    _step(model, loss, opt)
    return float(loss.item())


def _one_answer_step(model: Any, tokenizer: Any, batch: list[tuple[list[int], list[int]]], opt: Any) -> float:
    """One AdamW step of the causal-LM loss on completion tokens and EOS, a padded row each."""
    import torch

    width = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (p, c) in enumerate(batch):
        seq = p + c
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, len(p) : len(seq)] = torch.tensor(c)
        mask[row, : len(seq)] = 1
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    _step(model, loss, opt)
    return float(loss.item())


def _step(model: Any, loss: Any, opt: Any) -> None:
    import torch

    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
