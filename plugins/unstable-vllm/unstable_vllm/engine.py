"""One vLLM engine (``AsyncLLM``) for one base model, and its LoRA adapters.

Every coroutine here runs on the engine's own event loop (``EngineThread``): vLLM's output
handler is a task of the loop the engine was made on, and a rollout may call the backend from
another loop (or from a thread, for ``load_checkpoint``).

Adapters: each (checkpoint uid, path, version) is loaded once, under a fresh integer id that is
never reused (vLLM caches adapters by id: reusing an id after overwriting the files would keep
serving the old weights); the least recently used is removed beyond ``max_cpu_loras``.

Base requests beside LoRA requests: vLLM 0.32 on the CPU computes a request without LoRA that
shares a batch with LoRA requests with the adapter of the last slot (upstream PR #48421). Once
the first adapter is loaded, the base model is served as an all-zero adapter (identical output);
requests already running without LoRA finish before that first adapter is added, so no batch
ever mixes the two.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from unstable_core import Completion, ModelRef

from .options import VLLMInferenceOptions, VLLMModelOptions

T = TypeVar("T")
_ids = itertools.count(1)  # adapter ids: fresh in this process, never reused


class EngineThread:
    """A daemon thread running an event loop, for one engine."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)


def engine_args(path: str, options: VLLMInferenceOptions, max_model_len: int) -> Any:
    """vLLM's ``AsyncEngineArgs`` from the backend's options."""
    from vllm import AsyncEngineArgs
    from vllm.platforms import current_platform

    chunked = options.enable_chunked_prefill
    if chunked is None and current_platform.is_cpu():
        chunked = False  # a per-request seed crashes the CPU sampler on a split prefill
    batched = options.max_num_batched_tokens
    if chunked is False and batched is None:
        batched = max(max_model_len, 2048)
    return AsyncEngineArgs(
        model=path,
        tokenizer=path,
        dtype=options.dtype,
        trust_remote_code=options.trust_remote_code,
        seed=options.seed,
        enable_lora=options.enable_lora,
        max_loras=options.max_loras,
        max_lora_rank=options.max_lora_rank,
        # the backend removes adapters past max_cpu_loras itself; the zero adapter comes on top
        max_cpu_loras=(options.max_cpu_loras or options.max_loras) + int(zero_mode(options)),
        gpu_memory_utilization=options.gpu_memory_utilization,
        tensor_parallel_size=options.tensor_parallel_size,
        max_model_len=max_model_len,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=batched,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=options.enable_prefix_caching,
        enforce_eager=options.enforce_eager,
        distributed_executor_backend=options.distributed_executor_backend,
        kv_cache_memory_bytes=None if options.kv_cache_gib is None else int(options.kv_cache_gib * 2**30),
        enable_sleep_mode=sleep_mode(options),
        logprobs_mode="processed_logprobs",  # logprobs of the distribution sampled from (temperature applied)
        disable_log_stats=True,
    )


def model_max_len(path: str, options: VLLMInferenceOptions) -> int:
    """``max_model_len``, capped at what the model's config allows."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, trust_remote_code=options.trust_remote_code)
    limit = getattr(config, "max_position_embeddings", None)
    return min(options.max_model_len, limit) if limit else options.max_model_len


def sleep_mode(options: VLLMInferenceOptions) -> bool:
    """Whether engines start with vLLM's sleep mode: the option, or where the platform has it."""
    if options.enable_sleep_mode is not None:
        return options.enable_sleep_mode
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


def zero_mode(options: VLLMInferenceOptions) -> bool:
    if not options.enable_lora or options.base_as_zero_adapter == "never":
        return False
    if options.base_as_zero_adapter == "always":
        return True
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class Engine:
    def __init__(self, path: str, options: VLLMInferenceOptions, tokenizer: Any) -> None:
        self.path = path
        self.options = options
        self.tokenizer = tokenizer
        self.llm: Any = None
        self.adapters: OrderedDict[tuple[str, str, int], Any] = OrderedDict()  # LRU: key -> LoRARequest
        self.capacity = options.max_cpu_loras or options.max_loras
        self.zero: Any = None  # LoRARequest of the all-zero adapter, when the base is served through it
        self.zero_dir: str | None = None
        self.mixed = False  # an adapter has been loaded: base requests go through the zero adapter
        self.plain = 0  # requests without LoRA in flight
        self.plain_done = asyncio.Event()
        self.plain_done.set()
        self.add_lock = asyncio.Lock()

    async def start(self) -> None:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM's INFO lines drown the run's own
        from vllm.v1.engine.async_llm import AsyncLLM

        max_len = await asyncio.to_thread(model_max_len, self.path, self.options)
        args = engine_args(self.path, self.options, max_len)
        self.llm = AsyncLLM.from_engine_args(args)  # starts the engine core process(es); blocks this loop meanwhile
        if zero_mode(self.options):
            from vllm.lora.request import LoRARequest

            from .adapters import write_zero_adapter

            self.zero_dir = tempfile.mkdtemp(prefix="unstable-vllm-zero-")
            await asyncio.to_thread(write_zero_adapter, self.path, self.zero_dir, self.options.trust_remote_code)
            self.zero = LoRARequest("base(zero adapter)", next(_ids), self.zero_dir)

    # -- adapters -------------------------------------------------------------------------------
    async def adapter(self, ref: ModelRef) -> Any:
        """The LoRARequest that serves `ref` (None: the plain base model), loading it if needed."""
        if not ref.adapter_path:
            return self.zero if self.mixed else None
        if not self.options.enable_lora:
            raise ValueError(f"model {ref.uid!r} is a LoRA checkpoint, and this vllm backend has enable_lora = false")
        key = (ref.uid, ref.adapter_path, ref.version)
        found = self.adapters.get(key)
        if found is not None:
            self.adapters.move_to_end(key)
            return found
        async with self.add_lock:
            if key not in self.adapters:
                await self._add(key)
        return self.adapters[key]

    async def _add(self, key: tuple[str, str, int]) -> None:
        from vllm.lora.request import LoRARequest

        uid, path, version = key
        if self.zero is not None and not self.mixed:
            self.mixed = True  # new base requests take the zero adapter ...
            await self.plain_done.wait()  # ... and those running without LoRA finish first
            await self.llm.add_lora(self.zero)
        lora_id = next(_ids)
        request = LoRARequest(f"{uid}@v{version}#{lora_id}", lora_id, path)
        if not await self.llm.add_lora(request):
            raise RuntimeError(f"vLLM did not load the adapter of {uid!r} from {path}")
        self.adapters[key] = request
        while len(self.adapters) > self.capacity:
            _, old = self.adapters.popitem(last=False)
            await self.llm.remove_lora(old.lora_int_id)

    async def load(self, uid: str, path: str, version: int) -> None:
        """Load a checkpoint's adapter now and check that vLLM lists it as loaded."""
        request = await self.adapter(ModelRef(uid=uid, kind="checkpoint", adapter_path=path, version=version))
        loaded = await self.llm.list_loras()
        if request.lora_int_id not in loaded:
            raise RuntimeError(f"adapter {request.lora_name!r} is not among vLLM's loaded adapters {sorted(loaded)} after loading")

    # -- generation -----------------------------------------------------------------------------
    async def generate(self, ref: ModelRef, prompt_ids: list[int], seed: int) -> Completion:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        lora = await self.adapter(ref)
        options = self.options
        sampling = {"temperature": options.temperature, "top_p": options.top_p, "max_tokens": options.max_tokens}
        sampling.update(VLLMModelOptions.model_validate(ref.options).model_dump(exclude_none=True))  # this model's own
        params = SamplingParams(**sampling, seed=(seed ^ options.seed) & 0x7FFFFFFFFFFFFFFF, logprobs=0, detokenize=False)
        plain = lora is None and self.zero is not None
        if plain:
            self.plain += 1
            self.plain_done.clear()
        try:
            final = None
            async for final in self.llm.generate(TokensPrompt(prompt_token_ids=prompt_ids), params, uuid.uuid4().hex, lora_request=lora):  # noqa: B007 (the last output is the final one)
                pass
        finally:
            if plain:
                self.plain -= 1
                if self.plain == 0:
                    self.plain_done.set()
        assert final is not None
        out = final.outputs[0]
        tokens = list(out.token_ids)
        logprobs = [float(step[token].logprob) for token, step in zip(tokens, out.logprobs or [])]
        eos = self.tokenizer.eos_token_id
        text = self.tokenizer.decode([t for t in tokens if t != eos], skip_special_tokens=True)
        return Completion(text=text, prompt_token_ids=prompt_ids, completion_token_ids=tokens, logprobs=logprobs, policy_version=ref.version,
                          truncated=out.finish_reason == "length")

    async def sleep(self) -> None:
        """Weights to CPU memory, KV cache dropped (vLLM's sleep level 1)."""
        await self.llm.sleep(level=1)

    async def wake(self) -> None:
        await self.llm.wake_up()

    async def shutdown(self) -> None:
        """Cancel the requests still running (a run that stops mid-batch), then stop the engine."""
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None
        if self.zero_dir is not None:
            shutil.rmtree(self.zero_dir, ignore_errors=True)
