"""Token logprobs, forward + backward: naive vs chunked-under-autograd vs unstable_hf's
recomputing function, each in its own process, on the CPU.

    python bench/logprobs.py            # shapes up to 16k tokens x 151,936 vocab, hidden 1024
    python bench/logprobs.py --quick    # a smaller set, under a minute

For each shape a reference process computes float64 logprobs and hidden-state gradients chunk by
chunk (plain float64 matmul + log-sum-exp, written independently of the function under test);
then each method runs in a fresh process: peak memory increase (peak RSS minus RSS after the
inputs exist), wall time of forward + backward (loss = sum of logprob x random coefficient;
gradients for the hidden states, and with --train-weight for the lm_head weight too: by default
the lm_head is frozen, as in LoRA training), largest absolute error of values and hidden-state
gradients against the reference. A method that cannot fit in memory is reported as
OOM. The last line summarises the largest shape at which naive completes:
`summary: memory_ratio=X time_ratio=Y max_abs_err=Z` (naive's peak over ours; our time over naive's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

METHODS = ("naive", "chunked-autograd", "unstable")
FULL = [(2048, 151_936), (8192, 151_936), (16384, 151_936)]
QUICK = [(512, 32_000), (2048, 32_000)]


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def inputs(n: int, v: int, h: int):
    import torch

    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, h, generator=g)
    weight = torch.randn(v, h, generator=g) / h**0.5
    targets = torch.randint(v, (n,), generator=g)
    coef = torch.randn(n, generator=g)
    return hidden, weight, targets, coef


def reference(n: int, v: int, h: int, out: str) -> None:
    import torch

    hidden, weight, targets, coef = inputs(n, v, h)
    hd, wd = hidden.double(), weight.double()
    values = torch.empty(n, dtype=torch.float64)
    grad = torch.empty(n, h, dtype=torch.float64)
    for s in range(0, n, 256):
        z = hd[s : s + 256] @ wd.t()
        lse = torch.logsumexp(z, -1)
        values[s : s + 256] = z.gather(1, targets[s : s + 256, None]).squeeze(1) - lse
        p = torch.exp(z - lse[:, None])
        p[torch.arange(p.shape[0]), targets[s : s + 256]] -= 1
        grad[s : s + 256] = -(coef[s : s + 256, None].double() * p) @ wd
    torch.save({"values": values, "grad": grad}, out)


def worker(method: str, n: int, v: int, h: int, ref_path: str, train_weight: bool) -> None:
    import torch

    from unstable_hf.logprobs import chunked_autograd_logprobs, naive_token_logprobs, token_logprobs

    hidden, weight, targets, coef = inputs(n, v, h)
    hidden.requires_grad_(True)
    weight.requires_grad_(train_weight)
    base = rss_bytes()
    t = time.perf_counter()
    if method == "naive":
        out = naive_token_logprobs(hidden, weight, targets)
    elif method == "chunked-autograd":
        out = chunked_autograd_logprobs(hidden, weight, targets, chunk_size=1024)
    else:
        out = token_logprobs(hidden, weight, targets)
    (out * coef).sum().backward()
    elapsed = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ref = torch.load(ref_path)
    err = max(float((out.detach().double() - ref["values"]).abs().max()), float((hidden.grad.double() - ref["grad"]).abs().max()))
    print(json.dumps({"peak": max(0, peak - base), "time": elapsed, "err": err}))


def run(cmd: list[str]) -> dict | None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None  # killed for memory (or failed): reported as OOM
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--train-weight", action="store_true", help="also compute the lm_head weight gradient")
    ap.add_argument("--worker", nargs=5, metavar=("METHOD", "N", "V", "H", "REF"), help=argparse.SUPPRESS)
    ap.add_argument("--reference", nargs=4, metavar=("N", "V", "H", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        m, n, v, h, ref = args.worker
        return worker(m, int(n), int(v), int(h), ref, args.train_weight)
    if args.reference:
        n, v, h, out = args.reference
        return reference(int(n), int(v), int(h), out)

    shapes = QUICK if args.quick else FULL
    me = [sys.executable, os.path.abspath(__file__)]
    print(f"lm_head {'trained' if args.train_weight else 'frozen (LoRA)'}, hidden {args.hidden}")
    print(f"{'tokens':>7} {'vocab':>8} {'method':<17} {'peak MiB':>10} {'seconds':>9} {'max abs err':>12}")
    print("-" * 68)
    summary = None
    with tempfile.TemporaryDirectory() as d:
        for n, v in shapes:
            ref = os.path.join(d, f"ref-{n}-{v}.pt")
            subprocess.run([*me, "--reference", str(n), str(v), str(args.hidden), ref], check=True)
            res = {}
            for method in METHODS:
                r = run([*me, "--worker", method, str(n), str(v), str(args.hidden), ref] + (["--train-weight"] if args.train_weight else []))
                res[method] = r
                if r is None:
                    print(f"{n:>7} {v:>8} {method:<17} {'OOM':>10} {'-':>9} {'-':>12}")
                else:
                    print(f"{n:>7} {v:>8} {method:<17} {r['peak'] / 2**20:>10.0f} {r['time']:>9.2f} {r['err']:>12.2e}")
            if res["naive"] is not None and res["unstable"] is not None:
                summary = (n, v, res["naive"]["peak"] / max(res["unstable"]["peak"], 1), res["unstable"]["time"] / res["naive"]["time"], res["unstable"]["err"])
    if summary:
        n, v, mem, tim, err = summary
        print(f"\nlargest shape where naive completes: {n} tokens x {v} vocab")
        print(f"summary: memory_ratio={mem:.1f} time_ratio={tim:.2f} max_abs_err={err:.2e}")


if __name__ == "__main__":
    main()
