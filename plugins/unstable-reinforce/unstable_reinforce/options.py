from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from unstable_hf.options import LoraOptions, ModelLoadOptions


class ReinforceOptions(ModelLoadOptions):
    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-5, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    mini_batch_size: int = Field(1, ge=1, description="Steps per forward/backward; the batch is split in such chunks (gradient accumulation).")
    max_train_len: int | None = Field(None, ge=2, description="Truncate prompt + completion to this many tokens (the prompt loses its beginning).")
    normalizer: Literal["max_generation_len", "tokens"] = Field(
        "max_generation_len",
        description="Divide each sequence's logprob sum by the constant max_generation_len (Dr. GRPO, UnstableBaselines) or by its token count.",
    )
    max_generation_len: int = Field(4096, ge=1, description="The constant normaliser.")
    grad_clip: float = Field(1.0, gt=0, description="Global gradient-norm clip (the logged grad_norm is before clipping).")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in backward to save memory.")
    importance_sampling: bool = Field(False, description="Truncated importance-sampling correction from the rollout logprobs.")
    is_cap: float = Field(2.0, gt=0, description="Cap of the per-token importance weight exp(new - rollout logprob).")
    temperature: float = Field(1.0, gt=0, description="Temperature of the training logprobs (match the rollout's).")
    logprob_chunk_size: int | None = Field(None, ge=1, description="Tokens per logprob chunk (None: chosen from free memory).")
    lora: LoraOptions = Field(default_factory=LoraOptions, description="LoRA shape (must match the inference backend's).")
