"""Generation tokens/s of the `hf` and `vllm` backends on the same tiny model and workload.

    python bench/generation.py [--games 96] [--repeat 2] [--quick]

Run it where vLLM is installed (docs/vllm.md: the plugin's own environment). The workload is
the main job's: KuhnPoker-v0-train self-play with the kuhn-tiny model in both seats, 16 games in
flight, the qwen3-zs template, 12 tokens at most per turn, each backend with the options of its
example config (examples/kuhn-tiny.toml, examples/kuhn-tiny-vllm.toml); `hf` also with
`share_prompt_prefixes = false` (row `hf-pad`, the `hf` of the earlier figures). Measured for the base
model, then with a LoRA adapter (rank 16, as the learner's) loaded as a checkpoint and served;
for vllm also the base model once adapters are loaded (on the CPU it is then served through the
all-zero adapter: LoRA speed). Each cell is the best of --repeat runs (noise only slows a run
down); an engine's start and a warm-up round are not timed.

logprob_max_abs_diff: the largest difference between a sampled token's logprob reported by vllm
and the same token's logprob from a transformers + peft forward in float32 (base and adapter).
Targets on a CPU: vllm_over_hf_base >= 1.5, logprob_max_abs_diff <= 1e-4.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from typing import Any

from bench_args import games_parser, parse

MODEL = "tiny:KuhnPoker-v0-train?sft_steps=150"
ENV_ID = "KuhnPoker-v0-train"
LORA = {"rank": 16, "alpha": 32}


async def play(backend: Any, ref: Any, template: Any, games: int, in_flight: int, seed: int) -> int:
    """Play `games` self-play games, `in_flight` at a time; return the tokens generated. `ref`:
    the model of every seat, or a function (game, player) -> that seat's model."""
    import textarena as ta

    from unstable_core import GenerationRequest

    tokens = 0
    next_game = iter(range(games))

    async def worker() -> None:
        nonlocal tokens
        for g in next_game:
            env = ta.make(ENV_ID)
            env.reset(num_players=2, seed=seed + g)
            done, turn = False, 0
            while not done and turn < 40:
                pid, observation = env.get_observation()
                prompt = template.render(observation, tokenizer=backend.tokenizer)
                model = ref(g, pid) if callable(ref) else ref
                out = await backend.generate(GenerationRequest(model=model, prompt=prompt, seed=(seed + g) * 1000 + turn))
                tokens += len(out.completion_token_ids)
                action, _ = template.extract(out.text)
                done, _ = env.step(action=action)
                turn += 1
            env.close()

    await asyncio.gather(*[worker() for _ in range(in_flight)])
    return tokens


def tokens_per_s(backend: Any, ref: Any, template: Any, games: int, repeat: int) -> float:
    asyncio.run(play(backend, ref, template, 16, 16, seed=10_000))  # warm-up: not timed
    best = 0.0
    for r in range(repeat):
        t = time.perf_counter()
        tokens = asyncio.run(play(backend, ref, template, games, 16, seed=r * 100_000))
        best = max(best, tokens / (time.perf_counter() - t))
    return best


def main() -> None:
    parser = games_parser(__doc__, games=96, repeat=2, quick=(32, 1))
    parser.add_argument("--vllm-options", default="{}", help="JSON merged into the vllm backend's options")
    parser.add_argument("--vllm-only", action="store_true", help="skip hf (for tuning vLLM's settings; no summary line)")
    args = parse(parser)

    from unstable_core import Checkpoint, ModelRef, build_component, load_plugins
    from unstable_hf.loading import resolve_model_path
    from unstable_vllm.inference import VLLMInference
    from unstable_vllm.options import VLLMInferenceOptions
    from unstable_vllm.testing import HFReference, max_abs_diff, write_random_adapter

    system = load_plugins()
    template = build_component("template", "qwen3-zs", {}, plugins=system)
    path = resolve_model_path(MODEL)
    adapter_dir = tempfile.mkdtemp(prefix="bench-adapter-")
    write_random_adapter(path, adapter_dir, rank=LORA["rank"], scale=0.01, seed=5)
    base = ModelRef(uid="base", kind="base", backend="x", model=path)
    ckpt = Checkpoint(uid="ckpt-1", version=1, path=adapter_dir)
    lora = ModelRef(uid="ckpt-1", kind="checkpoint", backend="x", model=path, adapter_path=adapter_dir, version=1)

    rows: dict[str, dict[str, float]] = {}
    if not args.vllm_only:
        measure_hf(rows, base, lora, ckpt, template, args)

    vllm = VLLMInference(VLLMInferenceOptions(**{
        "dtype": "float32", "max_tokens": 12, "temperature": 1.0, "max_lora_rank": 16, "max_model_len": 1024, "enforce_eager": True, "kv_cache_gib": 1,
        **json.loads(args.vllm_options),
    }))
    vllm.prepare(base)
    rows["vllm"] = {"base": tokens_per_s(vllm, base, template, args.games, args.repeat)}
    vllm.load_checkpoint(ckpt)
    rows["vllm"]["lora"] = tokens_per_s(vllm, lora, template, args.games, args.repeat)
    rows["vllm"]["base beside adapters"] = tokens_per_s(vllm, base, template, args.games, args.repeat)

    # logprob parity on completions of the workload's prompts
    worst = 0.0
    for ref, reference in ((base, HFReference(path)), (lora, HFReference(path, adapter_dir))):
        outs = asyncio.run(sample(vllm, ref, template, 16))
        for out in outs:
            worst = max(worst, max_abs_diff(out.logprobs, reference.logprobs(out.prompt_token_ids, out.completion_token_ids)))
    vllm.close()

    print(f"{'backend':<8} {'base tok/s':>11} {'lora tok/s':>11} {'base beside adapters':>21}")
    for name, row in rows.items():
        beside = f"{row['base beside adapters']:.0f}" if "base beside adapters" in row else "-"
        print(f"{name:<8} {row['base']:>11.0f} {row['lora']:>11.0f} {beside:>21}")
    print(f"games {args.games}, 16 in flight, best of {args.repeat}; {os.cpu_count()} CPUs; logprob max abs diff {worst:.2e}")
    if args.vllm_only:
        return
    x = rows["vllm"]["base"] / rows["hf"]["base"]
    y = rows["vllm"]["lora"] / rows["hf"]["lora"]
    padded = rows["vllm"]["base"] / rows["hf-pad"]["base"]
    print(f"summary: vllm_over_hf_base={x:.2f} vllm_over_hf_lora={y:.2f} logprob_max_abs_diff={worst:.2e} vllm_over_hf_padded_base={padded:.2f}")


def measure_hf(rows: dict[str, dict[str, float]], base: Any, lora: Any, ckpt: Any, template: Any, args: Any) -> None:
    """`hf` as configured by default (shared prompt prefixes) and with one left-padded batch."""
    from unstable_hf.inference import HFInference, HFInferenceOptions

    for name, share in (("hf", True), ("hf-pad", False)):
        hf = HFInference(HFInferenceOptions(device="cpu", max_tokens=12, temperature=1.0, batch_wait_ms=10, lora=LORA, share_prompt_prefixes=share))
        hf.prepare(base)
        rows[name] = {"base": tokens_per_s(hf, base, template, args.games, args.repeat)}
        hf.load_checkpoint(ckpt)
        rows[name]["lora"] = tokens_per_s(hf, lora, template, args.games, args.repeat)
        hf.close()


async def sample(backend: Any, ref: Any, template: Any, n: int) -> list[Any]:
    """`n` completions of first-turn prompts of the workload."""
    import textarena as ta

    from unstable_core import GenerationRequest

    requests = []
    for g in range(n):
        env = ta.make(ENV_ID)
        env.reset(num_players=2, seed=g)
        _, observation = env.get_observation()
        requests.append(GenerationRequest(model=ref, prompt=template.render(observation, tokenizer=backend.tokenizer), seed=g))
    return list(await asyncio.gather(*[backend.generate(r) for r in requests]))


if __name__ == "__main__":  # vLLM starts its engine in new processes: the guard is required
    main()
