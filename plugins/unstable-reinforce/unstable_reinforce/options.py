from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from unstable_hf.options import LearnerOptions


class ReinforceOptions(LearnerOptions):
    model_config = ConfigDict(extra="forbid")

    importance_sampling: bool = Field(False, description="Truncated importance-sampling correction from the rollout logprobs "
                                      "(with collection.answers = 'choice': the decision's pi(c) / pi_old(c) on each of its rows, "
                                      "their baseline re-formed with pi; refused there with a top_p below 1).")
    is_cap: float = Field(2.0, gt=0, description="Cap of the per-token importance weight exp(new - rollout logprob).")
    epochs: int = Field(1, ge=1, le=32,
        description="Optimizer steps an update takes over its batch (PPO-style reuse; more than 1 needs clip_ratio). "
                    "The checkpoint version still counts updates.")
    clip_ratio: float | None = Field(None, gt=0, lt=1,
        description="PPO's clipped surrogate: each token's ratio to the policy at the start of the update, exp(logp - "
                    "logp_start), is kept within 1 -/+ clip_ratio where moving it further would raise the objective "
                    "(Schulman et al. 2017). The first pass's gradient is REINFORCE's. None: plain REINFORCE.")

    @model_validator(mode="after")
    def _reuse_needs_a_clip(self) -> ReinforceOptions:
        if self.epochs > 1 and self.clip_ratio is None:
            raise ValueError(f"epochs = {self.epochs} takes several steps on one batch: set clip_ratio (e.g. 0.2) so "
                             "that the later passes stay near the policy the batch was scored with")
        return self
