"""Generation with shared prompt prefixes against one left-padded batch, in the `hf` backend.

    python bench/shared_prefill.py [--games 96] [--repeat 3] [--quick]

The workload is bench/generation.py's (the main job's): KuhnPoker-v0-train self-play with the
kuhn-tiny model in both seats, the qwen3-zs template, 12 tokens at most per turn, at 16 games in
flight (the main job's training games) and 48 (training games beside an evaluation's 32), for
the base model and for a LoRA adapter (rank 16). The two settings of `share_prompt_prefixes`
take turns, each cell the best of --repeat runs. Per cell: generation tokens/s and the positions
prefill computed per prompt token (padding included). Then the largest difference of a sampled
token's logprob between the two on one batch of 48 prompts (float32; the tests check float64).

    summary: shared_over_padded_16=X shared_over_padded_48=Y prefill_per_prompt_token=P logprob_max_abs_diff=Z

(X, Y: the base model's tokens/s ratios; P: shared prefill positions per prompt token at 48.)
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time

from bench_args import games_parser, parse
from generation import ENV_ID, LORA, MODEL, play


def main() -> None:
    args = parse(games_parser(__doc__, games=96, repeat=3, quick=(48, 2)))

    from unstable_core import Checkpoint, GenerationRequest, ModelRef, build_component, load_plugins
    from unstable_hf.inference import HFInference, HFInferenceOptions
    from unstable_hf.loading import resolve_model_path
    from unstable_hf.testing import random_lora_adapter

    template = build_component("template", "qwen3-zs", {}, plugins=load_plugins())
    path = resolve_model_path(MODEL)
    adapter = random_lora_adapter(path, tempfile.mkdtemp(prefix="bench-adapter-"), seed=5, rank=LORA["rank"], alpha=LORA["alpha"], scale=0.01)
    base = ModelRef(uid="base", kind="base", backend="hf", model=path)
    lora = ModelRef(uid="ckpt-1", kind="checkpoint", backend="hf", model=path, adapter_path=adapter, version=1)
    backends = {}
    for share in (False, True):
        b = backends[share] = HFInference(HFInferenceOptions(device="cpu", max_tokens=12, temperature=1.0, top_p=0.95, batch_wait_ms=10,
                                                             share_prompt_prefixes=share, lora=LORA))
        b.prepare(base)
        b.load_checkpoint(Checkpoint(uid=lora.uid, version=1, path=adapter))
        asyncio.run(play(b, base, template, 16, 16, seed=10_000))  # warm-up: not timed

    rows = []
    for in_flight in (16, 48):
        for name, ref in (("base", base), ("lora", lora)):
            best = {False: 0.0, True: 0.0}
            per_token = {}
            for r in range(args.repeat):
                for share in (False, True) if r % 2 == 0 else (True, False):
                    b = backends[share]
                    prompt0, prefill0 = b.prompt_tokens, b.prefill_tokens
                    t = time.perf_counter()
                    tokens = asyncio.run(play(b, ref, template, args.games, in_flight, seed=r * 100_000))
                    best[share] = max(best[share], tokens / (time.perf_counter() - t))
                    per_token[share] = (b.prefill_tokens - prefill0) / (b.prompt_tokens - prompt0)
            rows.append((in_flight, name, best[False], best[True], per_token[False], per_token[True]))

    # sampled-token logprobs of one batch, both ways
    import textarena as ta

    env = ta.make(ENV_ID)
    prompts = []
    for g in range(48):
        env.reset(num_players=2, seed=g)
        for _ in range(g % 3):  # first, second and third turns
            env.step(action="[check]" if "[check]" in env.get_observation()[1] else "[call]")
        prompts.append(template.render(env.get_observation()[1], tokenizer=backends[True].tokenizer))
    requests = [GenerationRequest(model=base, prompt=p, seed=i) for i, p in enumerate(prompts)]
    outs = {share: backends[share].generate_batch(requests) for share in (False, True)}
    worst = max(abs(x - y) for a, b in zip(outs[False], outs[True]) for x, y in zip(a.logprobs, b.logprobs))
    same = all(a.completion_token_ids == b.completion_token_ids for a, b in zip(outs[False], outs[True]))

    print(f"{'in flight':>9} {'model':<5} {'padded tok/s':>12} {'shared tok/s':>12} {'ratio':>6} {'prefill/prompt tok':>19}")
    for in_flight, name, padded, shared, pp, ps in rows:
        print(f"{in_flight:>9} {name:<5} {padded:>12.0f} {shared:>12.0f} {shared / padded:>6.2f} {pp:>9.2f} -> {ps:.2f}")
    print(f"games {args.games} a cell, best of {args.repeat}; {os.cpu_count()} CPUs; on 48 prompts: same tokens {same}, logprob max abs diff {worst:.1e}")
    ratio = {f: shared / padded for f, name, padded, shared, _, _ in rows if name == "base"}
    prefill = next(ps for f, name, _, _, _, ps in rows if f == 48 and name == "base")
    print(f"summary: shared_over_padded_16={ratio[16]:.2f} shared_over_padded_48={ratio[48]:.2f} "
          f"prefill_per_prompt_token={prefill:.2f} logprob_max_abs_diff={worst:.1e}")


if __name__ == "__main__":
    main()
