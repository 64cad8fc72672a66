"""Many LoRA adapters in the seats of the games in flight (a population sampler's opponents): one
generate call per base model with the adapters mixed in it, against one call per adapter.

    python bench/mixed_adapters.py [--games 96] [--repeat 2] [--quick] [--idle 0] [--device cpu|cuda]

The workload is bench/generation.py's (KuhnPoker-v0-train with the kuhn-tiny model, the qwen3-zs
template, 12 tokens at most per turn, 16 games in flight), with every seat of every game played
by one of K adapters (rank 16, the final norm saved whole as in the examples' `modules_to_save`,
weights small enough that the games play as the base model's), K = 1, 4 and 16, drawn per game
and seat. The two settings of the `hf` backend's `mixed_adapters` take turns, each cell the best
of --repeat runs: generation tokens/s and generate calls per request. `--idle N` loads N more
adapters that play no game (a population's older checkpoints, resident with `max_loras` large):
peft's own switching of adapters walks every resident one, the hooks of mixed adapters do not.
`--device cuda` serves the games on the GPU (exit 2 with one line without one).

    summary: mixed_over_per_adapter_4=X mixed_over_per_adapter_16=Y

(X, Y: tokens/s with mixed adapters over tokens/s with one call per adapter, at K = 4 and 16.)
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time

from bench_args import games_parser, parse
from generation import LORA, MODEL, play

COUNTS = (1, 4, 16)


def main() -> None:
    parser = games_parser(__doc__, games=96, repeat=2, quick=(32, 1))
    parser.add_argument("--idle", type=int, default=0, help="adapters resident besides those that play")
    parser.add_argument("--device", default="cpu", help="where the backend serves: cpu or cuda")
    args = parse(parser)
    if args.idle < 0:
        parser.error(f"--idle: at least 0 (found {args.idle})")
    from gpu_check import require_gpu

    require_gpu(args.device)  # --device cuda without a GPU: one line, exit 2

    from unstable_core import Checkpoint, ModelRef, build_component, load_plugins
    from unstable_hf.inference import HFInference, HFInferenceOptions
    from unstable_hf.loading import resolve_model_path
    from unstable_hf.testing import random_lora_adapter

    template = build_component("template", "qwen3-zs", {}, plugins=load_plugins())
    path = resolve_model_path(MODEL)
    root = tempfile.mkdtemp(prefix="bench-adapters-")
    lora = {**LORA, "modules_to_save": ["model.norm"]}
    refs = [ModelRef(uid=f"ckpt-{i}", kind="checkpoint", backend="hf", model=path, version=i + 1,
                     adapter_path=random_lora_adapter(path, f"{root}/a{i}", seed=i, rank=LORA["rank"], alpha=LORA["alpha"],
                                                      modules_to_save=["model.norm"], scale=0.01))
            for i in range(max(COUNTS) + args.idle)]
    refs, idle = refs[: max(COUNTS)], refs[max(COUNTS) :]
    backends = {}
    for mixed in (False, True):
        b = backends[mixed] = HFInference(HFInferenceOptions(device=args.device, max_tokens=12, temperature=1.0, batch_wait_ms=10,
                                                             max_loras=len(refs) + len(idle), mixed_adapters=mixed, lora=lora))
        b.prepare(refs[0])
        for ref in idle:
            b.load_checkpoint(Checkpoint(uid=ref.uid, version=ref.version, path=str(ref.adapter_path)))
        asyncio.run(play(b, lambda g, p: refs[(g + p) % max(COUNTS)], template, 16, 16, seed=10_000))  # warm-up, every adapter loaded

    rows = []
    for k in COUNTS:
        best: dict[bool, tuple[float, float]] = {}
        for r in range(args.repeat):
            for mixed in (False, True):
                b = backends[mixed]
                seat = lambda g, p, r=r, k=k: refs[random.Random(f"{r}:{g}:{p}").randrange(k)]  # noqa: E731
                calls, served = len(b.batches), sum(b.batches)
                t = time.perf_counter()
                tokens = asyncio.run(play(b, seat, template, args.games, 16, seed=r * 100_000))
                rate = tokens / (time.perf_counter() - t)
                per_request = (len(b.batches) - calls) / (sum(b.batches) - served)
                if rate > best.get(mixed, (0.0, 0.0))[0]:
                    best[mixed] = (rate, per_request)
        rows.append((k, best[False], best[True]))
    print(f"{'adapters':>8} {'per adapter tok/s':>18} {'calls/req':>10} {'mixed tok/s':>12} {'calls/req':>10} {'ratio':>6}")
    for k, (apart, apart_calls), (mixed, mixed_calls) in rows:
        print(f"{k:>8} {apart:>18.0f} {apart_calls:>10.2f} {mixed:>12.0f} {mixed_calls:>10.2f} {mixed / apart:>6.2f}")
    ratio = {k: mixed[0] / apart[0] for k, apart, mixed in rows}
    print(f"summary: mixed_over_per_adapter_4={ratio[4]:.2f} mixed_over_per_adapter_16={ratio[16]:.2f} idle={args.idle} device={args.device}")


if __name__ == "__main__":
    main()
