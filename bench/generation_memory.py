"""Peak memory of one ``hf`` generation call with a real vocabulary.

    python bench/generation_memory.py [--tokens 128] [--layers 2] [--rows 16] [--device cpu|cuda]

A random-weight model of the Qwen3-0.6B shape (``bench/gpu_check.py``'s, 151,936-token
vocabulary) with ``--layers`` layers, in float32 on the CPU and bfloat16 on CUDA, serves
``--rows`` KuhnPoker prompts together for ``--tokens`` tokens each (random weights rarely stop
early). Measured: the peak memory during that ``generate_batch`` above the memory held before it
(after one warm-up call; ``bench/prefix.py``'s measure: on the CPU the process's RSS, on CUDA
the allocator's), and the tokens/s. What grows
with rows x tokens x vocabulary is what generation keeps per position: with ``output_logits``
every position's ``[rows, vocabulary]`` logits until the call ends (float32: 1.16 GiB at
16 x 128), with the sampler keeping each drawn token's logprob only ``[rows]`` a position.

Ends with ``summary: peak_gib=X tokens_per_s=Y``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rows", type=int, default=16, help="prompts served together (at most 16)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from gpu_check import build_model, prompts, require_gpu
    from prefix import peak_mib, reset_peak

    require_gpu(args.device)  # --device cuda without a GPU: one line, exit 2

    from unstable_core import GenerationRequest, ModelRef
    from unstable_hf.inference import HFInference, HFInferenceOptions

    cuda = args.device.startswith("cuda")
    path = build_model("qwen3-0.6b", Path(tempfile.mkdtemp()), args.layers, args.device)
    hf = HFInference(HFInferenceOptions(device=args.device, dtype="bfloat16" if cuda else "float32", max_tokens=args.tokens, temperature=1.0, top_p=1.0,
                                        max_batch_size=args.rows))
    base = ModelRef(uid="base", kind="base", backend="hf", model=str(path))
    hf.prepare(base)
    requests = [GenerationRequest(model=base, prompt=t, seed=i) for i, t in enumerate(prompts()[: args.rows])]
    hf.generate_batch(requests[:2])  # warm-up
    reset_peak(args.device)
    before = peak_mib(args.device) / 1024  # right after the reset the peak is what is held now
    start = time.perf_counter()
    outs = hf.generate_batch(requests)
    seconds = time.perf_counter() - start
    peak = peak_mib(args.device) / 1024 - before
    tokens = sum(len(o.completion_token_ids) for o in outs)
    print(f"{'rows':>4} {'tokens':>7} {'layers':>6} {'seconds':>8} {'tokens/s':>9} {'peak GiB':>9} {'before GiB':>11}")
    print(f"{args.rows:>4} {tokens:>7} {args.layers:>6} {seconds:>8.1f} {tokens / seconds:>9.1f} {peak:>9.2f} {before:>11.2f}")
    print(f"summary: peak_gib={peak:.2f} tokens_per_s={tokens / seconds:.1f}")


if __name__ == "__main__":
    main()
