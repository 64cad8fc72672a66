"""inference `hf`: transformers generation, batched across every game in flight.

Requests queue up; a batcher task serves everything that arrived within ``batch_wait_ms`` (as
UnstableBaselines' vLLM actor does every 20 ms) in one ``generate`` call per base model (its
adapters mixed in the batch, ``mixed_adapters.py``; else one call per adapter), in a worker thread
so the event loop keeps scheduling games (``batching.py``). Several LoRA adapters stay resident
(``max_loras``, least recently used evicted); a new checkpoint is loaded as a new adapter without
reloading the base model. Each completion carries its prompt and completion token ids, the logprob
of every completion token under the sampling distribution (temperature applied, top-p truncation
not) and the policy version. Sampling uses the ``temperature`` and ``top_p`` options and nothing
else: the sampling fields of a model folder's ``generation_config.json`` (a repetition penalty,
top-k, its own temperature) are not applied, and named once in the log; its end-of-sequence ids
are: a completion ends at the first of the tokenizer's eos and the folder's ``eos_token_id``s
(``sampling.end_ids``: Gemma-2-it's ``<end_of_turn>``). Every request samples
from its own seed, so its completion does not depend on the batch it was served in
(``sampling.py``). A prompt prefix that
prompts of a batch share (the template, the rules, the game so far) is prefilled once and
continued per prompt from its cache (``shared_prefill.py``; ``share_prompt_prefixes``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from typing import Any

from unstable_core import Checkpoint, Completion, GenerationRequest, ModelRef

from .batching import RequestBatcher
from .cache_name import cache_name
from .loading import resolve_model_path
from .mixed_adapters import BASE, generate_calls, mixed
from .mixed_adapters import unsupported as unsupported_mix
from .options import HFInferenceOptions

log = logging.getLogger("unstable.hf")


class HFInference:
    def __init__(self, options: HFInferenceOptions) -> None:
        self.options = options
        self.tokenizer: Any = None
        self._bases: dict[str, Any] = {}  # resolved base path -> PeftModel
        self._adapters: OrderedDict[str, str] = OrderedDict()  # uid -> adapter path (resident)
        self._batcher = RequestBatcher(self.generate_batch, self._calls, options.batch_wait_ms, options.max_batch_size)
        self._lock = threading.Lock()
        self.batches: list[int] = []  # sizes of served batches (for tests and benches)
        self.generated_tokens = 0
        self.prompt_tokens = 0  # tokens of the prompts served
        self.prefill_tokens = 0  # positions their prefill computed (padding included)
        self._mixes: dict[str, bool] = {}  # model name -> whether its adapters share generate calls
        self._prefix_support: dict[int, str | None] = {}  # id(base model) -> why shared prefixes are off
        self._awake_devices: dict[str, Any] = {}  # resolved base path -> its device, while asleep
        self._folder_ends: dict[str, Any] = {}  # resolved base path -> its generation_config's eos_token_id

    # -- models ---------------------------------------------------------------------------------
    def _base(self, ref: ModelRef) -> Any:
        from .loading import load_causal_lm, load_tokenizer, resolve_model_path, with_lora

        path = resolve_model_path(ref.model, self.options)
        if path not in self._bases:
            model = load_causal_lm(path, self.options)
            tok = load_tokenizer(path, self.options)
            if self.tokenizer is None:
                self.tokenizer = tok
            self._own_generation_config(path, model, tok)
            peft_model = with_lora(model, self.options.lora)
            peft_model.eval()
            self._bases[path] = peft_model
        return self._bases[path]

    def _own_generation_config(self, path: str, model: Any, tok: Any) -> None:
        """Replace the model's ``generation_config`` (its folder's) by one with the special token
        ids only (``sampling.py``); say once which of its sampling fields are not applied. Its end
        ids are kept with the tokenizer's: completions end at each (``end_ids``)."""
        from .sampling import clean_generation_config, end_ids, folder_sampling

        o = self.options
        found = folder_sampling(getattr(model, "generation_config", None), o.temperature, o.top_p)
        if found:
            fields = ", ".join(f"{k}={v}" for k, v in found.items())
            log.warning("hf inference: %s/generation_config.json sets %s: not applied; sampling uses the run's options "
                        "(inference.temperature = %s, inference.top_p = %s, nothing else)", path, fields, o.temperature, o.top_p)
        self._folder_ends[path] = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        model.generation_config = clean_generation_config(tok.pad_token_id, end_ids(tok.eos_token_id, self._folder_ends[path]),
                                                          tok.bos_token_id)

    def _end_ids(self, name: str) -> list[int]:
        """The ids a completion of base model ``name`` (loaded) ends at: the tokenizer's eos and
        its folder's (``sampling.end_ids``)."""
        from .sampling import end_ids

        return end_ids(self.tokenizer.eos_token_id, self._folder_ends[resolve_model_path(name, self.options)])

    def _resident(self, model: Any, ref: ModelRef) -> str | None:
        """Load `ref`'s adapter unless resident (most recently used now); None: the base model."""
        if not ref.adapter_path:
            return None
        if ref.uid not in self._adapters:
            self._load_adapter(model, ref.uid, ref.adapter_path)
        self._adapters.move_to_end(ref.uid)
        return ref.uid

    def _activate(self, model: Any, ref: ModelRef) -> str | None:
        """Make `ref`'s adapter active; None means the base model (adapters disabled)."""
        adapter = self._resident(model, ref)
        if adapter is not None:
            model.set_adapter(adapter)
        return adapter

    def prepare(self, ref: ModelRef) -> None:
        """Load the base model (and tokenizer) of `ref` now instead of at the first request."""
        with self._lock:
            self._base(ref)

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        """Check that the checkpoint holds a LoRA adapter, and load it now when its base model is
        resident (otherwise the first request that needs it loads it: its ModelRef carries the
        path); the base model is never reloaded. Returns the version now served."""
        from pathlib import Path

        folder = Path(checkpoint.path)
        if not (folder / "adapter_config.json").is_file():
            raise ValueError(f"checkpoint {checkpoint.uid!r} at {folder} holds no LoRA adapter (adapter_config.json)")
        with self._lock:
            for model in self._bases.values():
                if checkpoint.uid not in self._adapters:
                    self._load_adapter(model, checkpoint.uid, str(folder))
        return checkpoint.version

    def _load_adapter(self, model: Any, uid: str, path: str) -> None:
        """Load an adapter under its uid, evicting the least recently used past max_loras."""
        while len(self._adapters) >= self.options.max_loras:
            old, _ = self._adapters.popitem(last=False)
            if old in model.active_adapters:  # else peft warns, at every such eviction, that it activates another
                model.set_adapter("default")  # the fresh adapter every base is wrapped with (loading.with_lora)
            model.delete_adapter(old)
        model.load_adapter(path, adapter_name=uid)
        self._adapters[uid] = path

    def _shares_prefixes(self, model: Any) -> bool:
        """Whether prompts' shared prefixes are prefilled once for this model (the option, and
        a model that allows it: said once in the log when it does not)."""
        if not self.options.share_prompt_prefixes:
            return False
        if id(model) not in self._prefix_support:
            from .shared_prefill import unsupported

            why = self._prefix_support[id(model)] = unsupported(model)
            if why:
                log.warning("hf inference: shared prompt prefixes off (%s); every prompt is prefilled whole", why)
        return self._prefix_support[id(model)] is None

    # -- generation -------------------------------------------------------------------------------
    def generate_batch(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Generate for requests of one base model (synchronous; used by the batcher): of one
        adapter, or of at most ``max_loras`` with ``mixed_adapters``. Each request samples from
        its own seed (``request.seed`` xor the ``seed`` option); one that offers ``choices``
        answers one of them (``choose_batch``)."""
        chosen = [i for i, r in enumerate(requests) if r.choices is not None]
        if chosen:
            free = [i for i, r in enumerate(requests) if r.choices is None]
            answered = dict(zip(chosen, self.choose_batch([requests[i] for i in chosen]), strict=True))
            if free:
                answered |= dict(zip(free, self.generate_batch([requests[i] for i in free]), strict=True))
            return [answered[i] for i in range(len(requests))]
        import torch
        from transformers import LogitsProcessorList

        from .sampling import PerRequestSampler, generation_config
        from .shared_prefill import prefill

        ref = requests[0].model
        with self._lock:
            model = self._base(ref)
            tok = self.tokenizer
            ends = self._end_ids(ref.model)
            names = [self._resident(model, r.model) or BASE for r in requests]
            hooked = self._mixes_adapters(ref.model)  # its adapters served by forward hooks (``mixed_adapters.py``)
            adapter = None if hooked else self._activate(model, ref)
            prompts = tok([r.prompt for r in requests], add_special_tokens=False)["input_ids"]  # one batch encode
            if self.options.max_prompt_tokens:
                prompts = [p[-self.options.max_prompt_tokens :] for p in prompts]
            device = next(model.parameters()).device
            sampler = PerRequestSampler([r.seed ^ self.options.seed for r in requests], self.options.temperature, self.options.top_p)
            plain = model.disable_adapter if adapter is None and not hooked else contextlib.nullcontext
            with torch.no_grad():
                with plain():  # a hooked batch's prefill adds its own prefix rows' adapters
                    inputs = prefill(model, prompts, tok.pad_token_id, device, share=self._shares_prefixes(model),
                                     adapters=names if hooked else None)
                width = inputs.input_ids.shape[1]
                self.prompt_tokens += sum(len(p) for p in prompts)
                self.prefill_tokens += inputs.computed
                with mixed(model, names) if hooked else plain():
                    out = model.generate(  # greedy over what the sampler left possible: its draw
                        input_ids=inputs.input_ids,
                        attention_mask=inputs.attention_mask,
                        **{cache_name(): inputs.cache},
                        logits_processor=LogitsProcessorList([sampler]),  # the only processor: nothing of the folder's
                        generation_config=generation_config(self.options.max_tokens, tok.pad_token_id, ends),
                    )
            new = out.sequences[:, width:].cpu()
            logp = sampler.logprobs().cpu()  # [B, T]: each drawn token's logprob, kept by the sampler as it drew
            results = []
            for i, r in enumerate(requests):
                toks: list[int] = []
                lps: list[float] = []
                for t in range(new.shape[1]):
                    tid = int(new[i, t])
                    toks.append(tid)
                    lps.append(float(logp[i, t]))
                    if tid in ends:  # the first end id ends it (the batch's other rows run on)
                        break
                self.generated_tokens += len(toks)
                text = tok.decode([t for t in toks if t not in ends], skip_special_tokens=True)
                results.append(
                    Completion(
                        text=text,
                        prompt_token_ids=prompts[i],
                        completion_token_ids=toks,
                        logprobs=lps,
                        policy_version=r.model.version,
                        truncated=not toks or toks[-1] not in ends,
                    )
                )
            self.batches.append(len(requests))
            return results

    def choose_batch(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Answer each request with one of its ``choices``, drawn with the probability the model
        gives each, renormalised over them (``choosing.py``)."""
        from .choosing import choose

        o, ref = self.options, requests[0].model
        with self._lock:
            model = self._base(ref)
            tok = self.tokenizer
            ends = self._end_ids(ref.model)
            prompts = tok([r.prompt for r in requests], add_special_tokens=False)["input_ids"]
            if o.max_prompt_tokens:
                prompts = [p[-o.max_prompt_tokens :] for p in prompts]
            if self._mixes_adapters(ref.model):  # a row per candidate scored, its adapter by forward hooks
                names = [self._resident(model, r.model) or BASE for r in requests]

                def serving(rows: list[int]) -> Any:
                    return mixed(model, [names[i] for i in rows])
            else:
                adapter = self._activate(model, ref)

                def serving(rows: list[int]) -> Any:
                    return model.disable_adapter() if adapter is None else contextlib.nullcontext(None)
            drawn = choose(model, tok, prompts, [list(r.choices or []) for r in requests], [r.seed ^ o.seed for r in requests],
                           o.max_tokens, o.temperature, o.top_p, serving)
            self.batches.append(len(requests))
        results = []
        for r, prompt, d in zip(requests, prompts, drawn, strict=True):
            self.generated_tokens += len(d.token_ids)
            self.prompt_tokens += len(prompt)
            results.append(Completion(text=d.text, prompt_token_ids=prompt, completion_token_ids=d.token_ids,
                                      logprobs=d.logprobs, policy_version=r.model.version,
                                      truncated=d.token_ids[-1] not in ends, choice_token_ids=d.choice_token_ids,
                                      choice_probabilities=d.choice_probabilities))
        return results

    def completion_probabilities(self, request: GenerationRequest, completions: list[str]) -> list[float]:
        """The exact probability that ``generate(request)`` answers each text (``scoring.py``): the
        text followed by any of the model's end ids."""
        from .scoring import ending_targets, sequence_probabilities

        o = self.options
        with self._lock:
            model = self._base(request.model)
            tok = self.tokenizer
            ends = self._end_ids(request.model.model)
            prompt = tok(request.prompt, add_special_tokens=False)["input_ids"]
            if o.max_prompt_tokens:
                prompt = prompt[-o.max_prompt_tokens :]
            targets = ending_targets(tok, completions, o.max_tokens, ends)
            pad = tok.pad_token_id if tok.pad_token_id is not None else 0
            serving: contextlib.AbstractContextManager[Any]
            if self._mixes_adapters(request.model.model):  # a row per target scored, its adapter by forward hooks
                serving = mixed(model, [self._resident(model, request.model) or BASE] * sum(len(ts) for ts in targets))
            else:
                adapter = self._activate(model, request.model)
                serving = model.disable_adapter() if adapter is None else contextlib.nullcontext()
            with serving:
                return sequence_probabilities(model, prompt, targets, pad, o.temperature, o.top_p)

    async def generate(self, request: GenerationRequest) -> Completion:
        return await self._batcher.submit(request)

    def _calls(self, pending: list[Any]) -> list[list[Any]]:
        """The (request, future) pairs of a batch cut into generate calls (``generate_calls``)."""
        def key(pair: Any) -> tuple[str, ...]:
            ref = pair[0].model
            return (ref.model,) if self._mixes_adapters(ref.model) else (ref.model, ref.uid, str(ref.adapter_path))

        return generate_calls(pending, key, lambda pair: pair[0].model.uid if pair[0].model.adapter_path else None,
                              self.options.max_loras)

    def _mixes_adapters(self, name: str) -> bool:
        """Whether the base model ``name`` serves mixed-adapter batches (said once in the log if
        it cannot; one not loaded yet does not)."""
        if not self.options.mixed_adapters:
            return False
        if name not in self._mixes:
            model = self._bases.get(resolve_model_path(name, self.options))
            if model is None:
                return False
            why = unsupported_mix(model)
            if why:
                log.warning("hf inference: one generate call per adapter (%s)", why)
            else:  # for good: no call switches peft's adapters, which walks every resident one (``mixed``)
                model.base_model.disable_adapter_layers()
            self._mixes[name] = why is None
        return self._mixes[name]

    # -- colocation (training.colocate) ------------------------------------------------------------
    def sleep(self) -> None:
        """Move every resident model (base and adapters) to the CPU and hand the accelerator's
        cached blocks back, so that the learner has that memory for its update. On the CPU
        nothing moves."""
        import torch

        with self._lock:
            self._awake_devices = {}
            for path, model in self._bases.items():
                device = next(model.parameters()).device
                if device.type != "cpu":
                    self._awake_devices[path] = device
                    model.to("cpu")
            if self._awake_devices and torch.cuda.is_available():
                torch.cuda.empty_cache()

    def wake(self) -> None:
        """Move the models back to the devices they were on before ``sleep``."""
        with self._lock:
            for path, device in self._awake_devices.items():
                self._bases[path].to(device)
            self._awake_devices = {}

    def close(self) -> None:
        self._batcher.close()

