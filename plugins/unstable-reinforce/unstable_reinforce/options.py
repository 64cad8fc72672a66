from __future__ import annotations

from pydantic import ConfigDict, Field

from unstable_hf.options import LearnerOptions


class ReinforceOptions(LearnerOptions):
    model_config = ConfigDict(extra="forbid")

    importance_sampling: bool = Field(False, description="Truncated importance-sampling correction from the rollout logprobs.")
    is_cap: float = Field(2.0, gt=0, description="Cap of the per-token importance weight exp(new - rollout logprob).")
