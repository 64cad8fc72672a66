"""Learner tokens/s, and generation tokens/s batched (16 games in flight) against one at a time.

    python bench/learner.py [--model tiny:KuhnPoker-v0-train] [--games 16] [--steps 3]

Generation: the `hf` backend answers 16 real KuhnPoker prompts submitted together (the batcher
serves them in one generate call) and then the same 16 one at a time. Learner: REINFORCE updates
on batches of 64 steps with those prompts and completions. Target: batched >= 4x sequential.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "2")

TARGET = 4.0


def prompts(n: int) -> list[str]:
    import random

    from unstable_core.builtin.env_textarena import TextArenaOptions, TextArenaProvider
    from unstable_core.builtin.templates import TEMPLATES, FormatTemplate
    from unstable_core.types import EnvSpec

    tpl = FormatTemplate(TEMPLATES["qwen3-zs"][1])
    provider = TextArenaProvider(TextArenaOptions())
    out = []
    for i in range(n):
        game = provider.make(EnvSpec(env_id="KuhnPoker-v0-train"))
        game.reset(num_players=2, seed=random.Random(i).getrandbits(31))
        out.append(tpl.render(game.observe()[1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="tiny:KuhnPoker-v0-train?sft_steps=150")
    ap.add_argument("--games", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()

    from unstable_core import Batch, GenerationRequest, ModelRef, Step, Turn
    from unstable_hf.inference import HFInference, HFInferenceOptions
    from unstable_reinforce.learner import ReinforceLearner
    from unstable_reinforce.options import ReinforceOptions

    texts = prompts(args.games)
    backend = HFInference(HFInferenceOptions(max_tokens=args.max_tokens, batch_wait_ms=50, max_batch_size=args.games))
    ref = ModelRef(uid="base", kind="base", backend="hf", model=args.model)
    backend.prepare(ref)
    reqs = [GenerationRequest(model=ref, prompt=t, seed=i) for i, t in enumerate(texts)]

    async def batched():
        return await asyncio.gather(*(backend.generate(r) for r in reqs))

    async def sequential():
        return [await backend.generate(r) for r in reqs]

    asyncio.run(sequential())  # warm-up
    rows = []
    for name, fn in (("one at a time", sequential), (f"batched ({args.games} in flight)", batched)):
        t = time.perf_counter()
        outs = asyncio.run(fn())
        el = time.perf_counter() - t
        toks = sum(len(o.completion_token_ids) for o in outs)
        rows.append((name, toks / el, el))
    learner = ReinforceLearner(ReinforceOptions(lr=1e-4, mini_batch_size=16, max_generation_len=args.max_tokens), args.model)
    steps = []
    for i, o in enumerate(outs * 4):
        turn = Turn(player_id=0, observation="", prompt="", prompt_token_ids=o.prompt_token_ids, completion=o.text,
                    completion_token_ids=o.completion_token_ids, logprobs=o.logprobs, action="", format_ok=True)
        steps.append(Step(env_id="KuhnPoker-v0-train", game_idx=i, player_id=0, turn_index=0, num_turns=1, turn=turn,
                          final_reward=1.0, reward=1.0 if i % 2 else -1.0))
    learner.update(Batch(steps=steps, learner_version=0))  # warm-up
    t = time.perf_counter()
    trained = processed = 0
    for s in range(args.steps):
        m = learner.update(Batch(steps=steps, learner_version=s))
        trained += m["train_tokens"]
        processed += sum(len(x.turn.prompt_token_ids) + len(x.turn.completion_token_ids) for x in steps)
    el = time.perf_counter() - t
    print(f"{'measure':<34} {'tokens/s':>10} {'seconds':>9}")
    print("-" * 56)
    for name, tps, sec in rows:
        print(f"{'generation, ' + name:<34} {tps:>10.1f} {sec:>9.2f}")
    print(f"{'learner, completion tokens':<34} {trained / el:>10.1f} {el:>9.2f}")
    print(f"{'learner, all tokens processed':<34} {processed / el:>10.1f} {el:>9.2f}")
    speedup = rows[1][1] / rows[0][1]
    print(f"\nsummary: generation_speedup={speedup:.1f}x target={TARGET}x {'ok' if speedup >= TARGET else 'MISSED'}")


if __name__ == "__main__":
    main()
