from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from unstable_hf.options import LearnerOptions


class ReinforceOptions(LearnerOptions):
    model_config = ConfigDict(extra="forbid")

    normalizer: Literal["max_generation_len", "tokens"] = Field(
        "max_generation_len",
        description="Divide each sequence's logprob sum by the constant max_generation_len (Dr. GRPO, UnstableBaselines) or by its token count.",
    )
    max_generation_len: int = Field(4096, ge=1, description="The constant normaliser.")
    importance_sampling: bool = Field(False, description="Truncated importance-sampling correction from the rollout logprobs.")
    is_cap: float = Field(2.0, gt=0, description="Cap of the per-token importance weight exp(new - rollout logprob).")
