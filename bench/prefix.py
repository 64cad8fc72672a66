"""Prefix-shared against padded learner forward: loss + backward time, peak memory, forward tokens,
gradient agreement, for each prefix-shared layout (``masks``: prefix tries in rows with ancestor
masks; ``segments``: cached-prefix segments; ``masks-flex``: the masks layout with FlexAttention
block masks whatever ``--prefix-attention`` says, CUDA only, to time both mask kinds in one process).

    python bench/prefix.py [--quick] [--device cpu|cuda] [--steps 64] [--runs 5] [--layouts masks,segments]
                           [--prefix-attention auto|dense|flex] [--mini-batch 16] [--mini-batch-tokens N]

The batch: ``--steps`` consecutive steps of whole games of scripted self-play (``random-valid``
in both seats, every turn) on KuhnPoker-v0-train and on TicTacToe-v0-train, rendered with the
``qwen3-zs`` template and tokenized by the kuhn-tiny tokenizer. Models, both with LoRA r16 in
float32: (a) the kuhn-tiny model, (b) a random-init model shaped like Qwen3-0.6B with 4 layers
(hidden 1024, 16 heads of 128, 8 KV heads, MLP 3072, vocabulary 151,936). Each (model, batch)
is one process that runs the REINFORCE loss over the batch in the learner's chunks (``--mini-batch``
steps, ``--mini-batch-tokens`` tokens) and its
backward: first once per path (padded and each layout), for its peak memory (on the CPU the peak
RSS, reset between the paths through ``/proc/self/clear_refs`` after freed memory is handed back
with ``malloc_trim``; on CUDA the allocator's peak) and its gradients, then the paths in turn,
forwards and backwards (ABBA order), one warm-up each, and the median of ``--runs`` timed runs of
each. This machine's speed drifts by tens of percent from one process to the next, which timing
the paths in one process cancels. "noshare" is the Kuhn batch with a distinct first token on
every step, so no two steps share a prefix.

Ends with ``summary: speedup_kuhn=X speedup_qwen=Y noshare_ratio=Z grad_rel_err=E``: padded over
prefix-shared time on KuhnPoker for each model, prefix-shared over padded time on the noshare
batch (tiny model), each with the first of ``--layouts`` (``masks``, the learners' default; the
faster layout is marked ``*``: the one ``prefix_layout = "auto"`` keeps when its own timings
agree), and the largest LoRA-gradient difference relative to the largest gradient (float32, any
layout). ``--quick`` (16 steps, a 2-layer Qwen shape on KuhnPoker
only, 2 runs of it) takes about 3 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")
TINY = "tiny:KuhnPoker-v0-train?sft_steps=150"
QWEN_SHAPE = {"hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 3072, "vocab_size": 151936}


def batch(tokenizer, env_id: str, n: int, noshare: bool) -> list:
    from unstable_hf.testing import self_play_steps

    steps = self_play_steps(tokenizer, env_id, n=n)
    if noshare:  # a distinct first token on every step: the tries share nothing
        steps = [s.model_copy(update={"turn": s.turn.model_copy(update={"prompt_token_ids": [3 + i] + s.turn.prompt_token_ids})})
                 for i, s in enumerate(steps)]
    return steps


def model(kind: str, layers: int, device: str, dtype: str = "float32"):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from unstable_hf.loading import resolve_model_path

    path = resolve_model_path(TINY)
    if kind == "tiny":
        return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device), path
    config = AutoConfig.from_pretrained(path)
    for key, value in {**QWEN_SHAPE, "num_hidden_layers": layers}.items():
        setattr(config, key, value)
    if getattr(config, "layer_types", None) is not None:  # one entry per layer (the tiny model has 2)
        config.layer_types = [config.layer_types[0]] * layers
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).to(device), path


def reset_peak(device: str) -> None:
    """Start a new peak-memory measurement from what the process holds now."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        return
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed memory back to the system: it leaves the RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := the RSS now (Linux >= 4.0)


def peak_mib(device: str) -> float:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) / 1024


def worker(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoTokenizer

    from unstable_hf.options import LearnerOptions
    from unstable_hf.training import LoraLearner

    class Reinforce(LoraLearner):
        def loss(self, steps, batch_size):
            packed = self.pack(steps)
            logp = self.policy.completion_logprobs(packed)
            adv = packed.tensor([s.reward for s in steps], dtype=logp.dtype)
            return -(adv * self.sequence_logprobs(packed, logp)).sum() / batch_size, {}

    causal, path = model(args.model, args.layers, args.device, args.dtype)
    steps = batch(AutoTokenizer.from_pretrained(path), args.env, args.steps, args.noshare)
    options = LearnerOptions(device=args.device, dtype=args.dtype, lora={"rank": 16, "alpha": 32}, prefix_budget=args.budget,
                             mini_batch_size=args.mini_batch, mini_batch_tokens=args.mini_batch_tokens,
                             prefix_attention=args.prefix_attention)
    learner = Reinforce(options, path, seed=0, causal_lm=causal)
    with torch.no_grad():  # the same non-zero adapter in every process
        g = torch.Generator().manual_seed(1)
        for p in learner.params:
            p.copy_((torch.randn(p.shape, generator=g) * 0.02).to(p.device))
    steps = sorted(steps, key=lambda s: s.turn.prompt_token_ids + s.turn.completion_token_ids)  # as the learner does

    def loss_and_backward(path: str) -> None:
        learner.set_prefix_sharing(path != "padded", layout=None if path == "padded" else path.removesuffix("-flex"))
        if path == "masks-flex":  # the masks layout with FlexAttention block masks, whatever --prefix-attention says
            if (why := learner.policy.flex_attention_unsupported()) is not None:
                raise SystemExit(f"masks-flex: {why}")
            learner.block_mask = True
        learner.counts.clear()
        for p in learner.params:
            p.grad = None
        for chunk in learner.chunks(steps):
            learner.loss(chunk, len(steps))[0].backward()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    paths = ("padded", *args.layouts.split(","))
    rows, grads = {}, {}
    for path in paths:  # memory, gradients, forward tokens; also the warm-up
        reset_peak(args.device)
        loss_and_backward(path)
        rows[path] = {"peak_mib": peak_mib(args.device), "forward_tokens": learner.counts["forward_tokens"],
                      "chunks": len(learner.chunks(steps)),
                      "attention": "flex block masks" if path.startswith("masks") and learner.block_mask else learner.policy.attention,
                      "sequence_tokens": learner.counts["sequence_tokens"]}
        grads[path] = {n: p.grad.detach().float().cpu() for n, p in learner.trainable().items()}
    times: dict[str, list[float]] = {path: [] for path in paths}
    for run in range(args.runs):
        for path in paths if run % 2 == 0 else paths[::-1]:  # ABBA: no path always runs last
            start = time.perf_counter()
            loss_and_backward(path)
            times[path].append(time.perf_counter() - start)
    for path in paths:
        rows[path]["seconds"] = statistics.median(times[path])
    scale = max(float(g.abs().max()) for g in grads["padded"].values())
    err = {path: max(float((grads["padded"][n] - grads[path][n]).abs().max()) for n in grads["padded"]) / scale for path in paths[1:]}
    print(json.dumps({"rows": rows, "grad_err": err}))


def run(args: argparse.Namespace, model_kind: str, env: str, noshare: bool) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--model", model_kind, "--env", env,
           "--steps", str(args.steps), "--runs", str(2 if args.quick and model_kind == "qwen" else args.runs), "--layers", str(args.layers), "--device",
               args.device,
           "--budget", str(args.budget), "--layouts", args.layouts, "--mini-batch", str(args.mini_batch), "--prefix-attention", args.prefix_attention,
               "--dtype", args.dtype]
    cmd += (["--noshare"] if noshare else []) + (["--mini-batch-tokens", str(args.mini_batch_tokens)] if args.mini_batch_tokens else [])
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"worker failed: {' '.join(cmd)}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="16 steps, a 2-layer Qwen shape on KuhnPoker only (2 runs)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--layers", type=int, default=4, help="layers of the Qwen3-0.6B-shaped model")
    ap.add_argument("--budget", type=int, default=2048, help="prefix_budget: most tokens in one shared row")
    ap.add_argument("--mini-batch", type=int, default=16, help="mini_batch_size: most steps in one chunk")
    ap.add_argument("--mini-batch-tokens", type=int, default=None, help="mini_batch_tokens: most tokens in one chunk")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the models' weights (the issue's bars: float32)")
    ap.add_argument("--prefix-attention", default="auto", choices=["auto", "dense", "flex"],
                    help="the shared path's masks: dense 4D, FlexAttention block masks (CUDA), auto (dense: measured faster)")
    ap.add_argument("--models", default="tiny,qwen", help="which models to run (the summary needs both)")
    ap.add_argument("--layouts", default="masks,segments",
                    help="the prefix-shared paths to time against padded: masks, segments, masks-flex (the summary reads the first)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="tiny", help=argparse.SUPPRESS)
    ap.add_argument("--env", default="KuhnPoker-v0-train", help=argparse.SUPPRESS)
    ap.add_argument("--noshare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.steps, args.layers = 16, 2
    cases = [("tiny", "KuhnPoker-v0-train", False), ("tiny", "TicTacToe-v0-train", False), ("tiny", "KuhnPoker-v0-train", True),
             ("qwen", "KuhnPoker-v0-train", False), ("qwen", "TicTacToe-v0-train", False)]
    cases = [c for c in cases if c[0] in args.models.split(",") and not (args.quick and c[0] == "qwen" and c[1] != "KuhnPoker-v0-train")]
    print(f"{args.steps} steps of scripted self-play, LoRA r16, {args.dtype}, {args.device}, mini-batch {args.mini_batch} steps"
          f"{f' / {args.mini_batch_tokens} tokens' if args.mini_batch_tokens else ''}, "
          f"prefix_attention {args.prefix_attention}, "
          f"budget {args.budget}, median of {args.runs} runs ({2 if args.quick else args.runs} for qwen); "
          f"qwen = Qwen3-0.6B shape with {args.layers} layers")
    print(f"{'model':<6} {'batch':<20} {'path':<10}{'seconds':>8} {'peak MiB':>9} {'fwd tokens':>11} {'of':>7} {'chunks':>6} "
          f"{'speedup':>8} {'grad err':>9}  attention")
    results: dict[tuple[str, str, bool], tuple[float, float]] = {}
    for model_kind, env, noshare in cases:
        label = ("noshare " if noshare else "") + env.split("-")[0]
        out = run(args, model_kind, env, noshare)
        rows, err = out["rows"], out["grad_err"]
        padded = rows["padded"]["seconds"]
        fastest = min(err, key=lambda path: rows[path]["seconds"])  # what 'auto' keeps
        default = next(iter(err))  # the first of --layouts: masks, the learners' default
        results[(model_kind, env, noshare)] = (padded / rows[default]["seconds"], max(err.values()))
        for path, r in rows.items():
            extra = f"{padded / r['seconds']:>8.2f} {err[path]:>9.1e}" if path in err else " " * 18
            mark = "*" if path == fastest and len(err) > 1 else " "
            print(f"{model_kind:<6} {label:<20} {path:<9}{mark}{r['seconds']:>8.3f} {r['peak_mib']:>9.0f} "
                  f"{r['forward_tokens']:>11} {r['sequence_tokens']:>7} {r['chunks']:>6} {extra}  {r['attention']}")
    kuhn = "KuhnPoker-v0-train"
    if len({m for m, _e, _n in cases}) < 2:
        return
    print(f"summary: speedup_kuhn={results[('tiny', kuhn, False)][0]:.2f} speedup_qwen={results[('qwen', kuhn, False)][0]:.2f} "
          f"noshare_ratio={1 / results[('tiny', kuhn, True)][0]:.2f} grad_rel_err={max(e for _, e in results.values()):.1e}")


if __name__ == "__main__":
    main()
