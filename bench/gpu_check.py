"""The GPU check: generation, learner, LoRA publication and a colocated step on one GPU, in one run.

    python bench/gpu_check.py [--quick] [--shapes qwen3-0.6b,qwen3-1.7b] [--keep-models DIR] [--json FILE]

No network: each model is built with random weights in the shape of a Qwen3 checkpoint (28
layers, the real widths and the 151,936-token vocabulary) around the tiny model's tokenizer, and
saved, so that every part loads it through ``from_pretrained`` as a run does. The workload is the
one of ``bench/learner.py``: 16 KuhnPoker-v0-train prompts in flight (``qwen3-zs`` template). For
each shape, in bfloat16:

- generation tokens/s of the ``hf`` backend, base model and through a LoRA adapter (rank 32, the
  seven projections), and of ``vllm`` when it is installed;
- learner update tokens/s (REINFORCE on 64 self-play steps) padded, prefix-shared with masks
  (dense and FlexAttention) and with segments;
- LoRA publication: the learner saves its adapter, the backend loads it, and the first request
  is served on the new version, in seconds;
- a colocated step: the inference backend's weights leave the GPU (``hf``: moved to the CPU),
  the learner updates, the weights come back and serve a request, end to end;
- the peak GPU memory of each part.

It ends with ``summary: vllm_over_hf_base=X vllm_over_hf_lora=Y prefix_speedup=Z publish_s=P
colocated_step_s=S`` (the first shape's figures; ``n/a`` where a part did not run). A part that
fails prints one line and the check goes on. Without a CUDA GPU it exits 2 with one line.
``--quick``: the 0.6B shape only, shorter completions, one timed update: about 2 minutes on an
H100-class GPU. docs/gpu.md says how to run it on a lent machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

SHAPES = {  # the published configs' widths (Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B)
    "qwen3-0.6b": {"hidden_size": 1024, "intermediate_size": 3072},
    "qwen3-1.7b": {"hidden_size": 2048, "intermediate_size": 6144},
}
COMMON = {"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
          "vocab_size": 151936, "tie_word_embeddings": True, "max_position_embeddings": 40960, "rope_theta": 1e6}
TOKENIZER = "tiny:KuhnPoker-v0-train?sft_steps=0"
GAMES = 16


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.strip().split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the 0.6B shape, 64-token completions, one timed update")
    ap.add_argument("--shapes", default=None, help="comma-separated, of " + ", ".join(SHAPES))
    ap.add_argument("--layers", type=int, default=None, help="layers of every shape (default 28, the real depth)")
    ap.add_argument("--max-tokens", type=int, default=None, help="tokens per completion (default 256; --quick 64)")
    ap.add_argument("--updates", type=int, default=None, help="timed learner updates per path (default 2; --quick 1)")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: a dry run of the wiring (tests)
    ap.add_argument("--keep-models", type=Path, default=None, help="save the built models here (else a temporary folder)")
    ap.add_argument("--stacks-after", type=float, default=None, help="print every thread's stack every N seconds")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    args.shapes = (args.shapes or ("qwen3-0.6b" if args.quick else "qwen3-0.6b,qwen3-1.7b")).split(",")
    for shape in args.shapes:
        if shape not in SHAPES:
            print(f"gpu_check: unknown shape {shape!r}; known: {', '.join(SHAPES)}")
            sys.exit(2)
    args.max_tokens = args.max_tokens or (64 if args.quick else 256)
    args.updates = args.updates or (1 if args.quick else 2)
    return args


def require_gpu(device: str) -> None:
    """Exit 2 with one line unless torch is importable and ``device`` is usable."""
    try:
        import torch
    except ImportError:
        print("gpu_check: torch is not installed; it needs torch with CUDA and the unstable-hf and unstable-reinforce plugins")
        sys.exit(2)
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here (torch.cuda.is_available() is False); run it on a GPU machine (docs/gpu.md)")
        sys.exit(2)


class Memory:
    """Peak GPU memory of a part (the allocator's peak since the part began), in GiB."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def start(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    def peak_gib(self) -> float | None:
        if not self.cuda:
            return None
        import torch

        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**30


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def build_model(shape: str, folder: Path, layers: int | None, device: str) -> Path:
    """A random-weight model of ``shape`` with the tiny tokenizer, saved in bfloat16 under ``folder``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from unstable_hf.loading import resolve_model_path

    tiny = resolve_model_path(TOKENIZER)
    config = AutoConfig.from_pretrained(tiny)
    for key, value in {**COMMON, **SHAPES[shape]}.items():
        setattr(config, key, value)
    if layers:
        config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = [config.layer_types[0]] * config.num_hidden_layers
    path = folder / shape
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(path)
    del model
    return path


def prompts() -> list[str]:
    sys.path.insert(0, str(Path(__file__).parent))
    from learner import prompts as kuhn_prompts

    return kuhn_prompts(GAMES)


def timed_generation(backend, ref, texts: list[str], device: str) -> tuple[float, float]:
    """(tokens/s, seconds) of the 16 prompts served together, after one warm-up."""
    from unstable_core import GenerationRequest

    reqs = [GenerationRequest(model=ref, prompt=t, seed=i) for i, t in enumerate(texts)]

    async def together():
        return await asyncio.gather(*(backend.generate(r) for r in reqs))

    t = time.perf_counter()
    asyncio.run(together())
    sync(device)
    print(f"  {ref.uid}: warm-up generation {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    outs = asyncio.run(together())
    sync(device)
    elapsed = time.perf_counter() - t
    return sum(len(o.completion_token_ids) for o in outs) / elapsed, elapsed


def make_learner(path: Path, device: str, max_tokens: int, **options):
    from unstable_reinforce.learner import ReinforceLearner
    from unstable_reinforce.options import ReinforceOptions

    opts = ReinforceOptions(device=device, dtype="bfloat16", lr=1e-5, mini_batch_size=64, mini_batch_tokens=8192,
                            max_generation_len=max_tokens, lora={"rank": 32, "alpha": 32}, **options)
    return ReinforceLearner(opts, str(path))


def learner_batch(path: Path):
    from transformers import AutoTokenizer

    from unstable_core import Batch
    from unstable_hf.testing import self_play_steps

    steps = self_play_steps(AutoTokenizer.from_pretrained(path), "KuhnPoker-v0-train", n=64)
    steps = [s.model_copy(update={"reward": 1.0 if i % 2 else -1.0}) for i, s in enumerate(steps)]
    return Batch(steps=steps, learner_version=0)


def timed_updates(learner, batch, updates: int, device: str) -> float:
    """Seconds of one update (mean of ``updates`` after a warm-up)."""
    learner.update(batch)
    sync(device)
    t = time.perf_counter()
    for _ in range(updates):
        learner.update(batch)
    sync(device)
    return (time.perf_counter() - t) / updates


class Check:
    """The figures of one shape, part by part; a part that fails is reported and skipped."""

    def __init__(self, args: argparse.Namespace, shape: str, path: Path, texts: list[str]) -> None:
        self.args, self.shape, self.path, self.texts = args, shape, path, texts
        self.device = args.device
        self.memory = Memory(args.device)
        self.rows: list[tuple[str, str, float | None, float | None]] = []  # part, measure, value, peak GiB
        self.figures: dict[str, float] = {}

    def part(self, name: str, fn) -> None:
        self.memory.start()
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the check reports every part it can
            print(f"[{self.shape}] {name}: FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            traceback.print_exc(limit=3, file=sys.stdout)
            return
        print(f"[{self.shape}] {name}: done in {time.perf_counter() - t:.1f} s")
        keys = [k for k in self.figures if k.startswith(name + ":")]
        peak = self.memory.peak_gib()
        if peak is not None:  # a part that resets the peak inside reports its own peaks too
            peak = max([peak] + [self.figures[k] for k in keys if k.endswith("peak GiB")])
        if peak is not None and keys:
            self.figures[f"{name}_peak_gib"] = peak
        for key in keys:
            self.rows.append((name, key.split(":", 1)[1], self.figures[key], peak))
            peak = None  # the part's peak on its first row

    def hf_generation(self) -> None:
        from unstable_core import ModelRef
        from unstable_hf.inference import HFInference, HFInferenceOptions

        self.hf = HFInference(HFInferenceOptions(device=self.device, dtype="bfloat16", max_tokens=self.args.max_tokens,
                                                 temperature=0.6, top_p=0.95, max_batch_size=GAMES, batch_wait_ms=50,
                                                 lora={"rank": 32, "alpha": 32}, max_loras=8))
        self.base = ModelRef(uid="base", kind="base", backend="hf", model=str(self.path))
        self.hf.prepare(self.base)
        tps, _ = timed_generation(self.hf, self.base, self.texts, self.device)
        self.figures["hf_generation:base tokens/s"] = tps

    def learner_and_publication(self) -> None:
        self.learner = make_learner(self.path, self.device, self.args.max_tokens)
        self.batch = learner_batch(self.path)
        with tempfile.TemporaryDirectory() as tmp:
            sync(self.device)
            t = time.perf_counter()
            ckpt = self.learner.save_checkpoint(tmp, "ckpt-1")
            self.hf.load_checkpoint(ckpt)
            self.lora = self.base.model_copy(update={"uid": ckpt.uid, "kind": "checkpoint", "adapter_path": ckpt.path,
                                                     "version": 1})
            from unstable_core import GenerationRequest

            asyncio.run(self.hf.generate(GenerationRequest(model=self.lora, prompt=self.texts[0], seed=0)))
            sync(self.device)
            self.figures["publication:save + load + first request s"] = time.perf_counter() - t
            tps, _ = timed_generation(self.hf, self.lora, self.texts, self.device)
        self.figures["publication:hf LoRA generation tokens/s"] = tps

    def learner_paths(self) -> None:
        tokens = sum(len(s.turn.prompt_token_ids) + len(s.turn.completion_token_ids) for s in self.batch.steps)
        paths = [("padded", {"prefix_sharing": False}), ("masks, dense", {"prefix_layout": "masks", "prefix_attention": "dense"}),
                 ("segments", {"prefix_layout": "segments"})]
        if self.device.startswith("cuda"):
            paths.append(("masks, flex", {"prefix_layout": "masks", "prefix_attention": "flex"}))
        for name, options in paths:
            self.memory.start()
            learner = make_learner(self.path, self.device, self.args.max_tokens, **options)
            try:
                seconds = timed_updates(learner, self.batch, self.args.updates, self.device)
                self.figures[f"learner:{name} tokens/s"] = tokens / seconds
                if (peak := self.memory.peak_gib()) is not None:
                    self.figures[f"learner:{name} peak GiB"] = peak
            except Exception as e:  # noqa: BLE001 - flex may be missing in a torch build
                print(f"[{self.shape}] learner {name}: FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            del learner
            self.free()
        padded, shared = self.figures.get("learner:padded tokens/s"), self.figures.get("learner:masks, dense tokens/s")
        if padded and shared:
            self.figures["prefix_speedup"] = shared / padded

    def colocated_step(self) -> None:
        """The backend's weights leave the GPU, the learner steps, the weights come back and serve."""
        import torch

        from unstable_core import GenerationRequest

        sync(self.device)
        t = time.perf_counter()
        self.hf.sleep()  # what training.colocate does before an update
        released = torch.cuda.memory_allocated() / 2**30 if self.device.startswith("cuda") else None
        self.learner.update(self.batch)
        self.hf.wake()
        asyncio.run(self.hf.generate(GenerationRequest(model=self.lora, prompt=self.texts[0], seed=1)))
        sync(self.device)
        self.figures["colocated:sleep + update + wake + request s"] = time.perf_counter() - t
        if released is not None:
            self.figures["colocated:GiB held while the learner stepped"] = released

    def vllm_generation(self) -> None:
        from unstable_vllm.inference import VLLMInference
        from unstable_vllm.options import VLLMInferenceOptions

        backend = VLLMInference(VLLMInferenceOptions(dtype="bfloat16", max_tokens=self.args.max_tokens, temperature=0.6,
                                                     top_p=0.95, max_lora_rank=32, gpu_memory_utilization=0.4,
                                                     max_model_len=4096))
        base = self.base.model_copy(update={"backend": "vllm"})
        backend.prepare(base)
        self.figures["vllm:base tokens/s"], _ = timed_generation(backend, base, self.texts, self.device)
        lora = self.lora.model_copy(update={"backend": "vllm"})
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = self.learner.save_checkpoint(tmp, "ckpt-2")
            backend.load_checkpoint(ckpt)
            lora = lora.model_copy(update={"uid": ckpt.uid, "adapter_path": ckpt.path, "version": 2})
            self.figures["vllm:LoRA tokens/s"], _ = timed_generation(backend, lora, self.texts, self.device)
        backend.close()
        hf_base, hf_lora = self.figures.get("hf_generation:base tokens/s"), self.figures.get("publication:hf LoRA generation tokens/s")
        if hf_base:
            self.figures["vllm_over_hf_base"] = self.figures["vllm:base tokens/s"] / hf_base
        if hf_lora:
            self.figures["vllm_over_hf_lora"] = self.figures["vllm:LoRA tokens/s"] / hf_lora

    def free(self) -> None:
        import gc

        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def run(self) -> dict[str, float]:
        self.part("hf_generation", self.hf_generation)
        if hasattr(self, "hf"):
            self.part("publication", self.learner_and_publication)
        if hasattr(self, "learner"):
            self.part("colocated", self.colocated_step)
        self.part("learner", self.learner_paths)
        if not has_vllm():
            print(f"[{self.shape}] vllm: not installed here; its rows are skipped")
        elif hasattr(self, "lora"):
            self.part("vllm", self.vllm_generation)
        return self.figures


def has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None and importlib.util.find_spec("unstable_vllm") is not None


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def main() -> None:
    args = parse()
    require_gpu(args.device)
    if args.stacks_after:  # where a slow part spends its time, before an outer timeout ends the check
        import faulthandler

        faulthandler.dump_traceback_later(args.stacks_after, repeat=True, file=sys.stdout)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    card = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"gpu_check on {card}, torch {torch.__version__}, shapes {', '.join(args.shapes)}, "
          f"{args.max_tokens}-token completions, {GAMES} prompts in flight")
    texts = prompts()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep_models or Path(tmp)
        for shape in args.shapes:
            t = time.perf_counter()
            path = build_model(shape, folder, args.layers, args.device)
            print(f"[{shape}] built and saved in {time.perf_counter() - t:.1f} s: {path}")
            check = Check(args, shape, path, texts)
            results[shape] = check.run()
            print(f"\n{shape}")
            print(f"{'part':<14} {'measure':<44} {'value':>10} {'peak GiB':>9}")
            print("-" * 80)
            for part, measure, value, peak in check.rows:
                print(f"{part:<14} {measure:<44} {fmt(value):>10} {fmt(peak):>9}")
            del check
            import gc

            gc.collect()
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps({"card": card, "torch": torch.__version__, "results": results}, indent=2))
    first = results[args.shapes[0]]
    names = {"vllm_over_hf_base": "vllm_over_hf_base", "vllm_over_hf_lora": "vllm_over_hf_lora",
             "prefix_speedup": "prefix_speedup", "publish_s": "publication:save + load + first request s",
             "colocated_step_s": "colocated:sleep + update + wake + request s"}
    print("\nsummary: " + " ".join(f"{k}={fmt(first.get(v))}" for k, v in names.items()))


if __name__ == "__main__":
    main()
