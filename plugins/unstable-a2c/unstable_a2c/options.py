from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from unstable_hf.options import LearnerOptions, LoraOptions


class A2COptions(LearnerOptions):
    model_config = ConfigDict(extra="forbid")

    gamma: float = Field(0.99, ge=0, le=1, description="Discount per turn of the same player.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda (1: Monte-Carlo returns minus V; 0: one-step TD).")
    critic: Literal["adapter", "model"] = Field(
        "adapter",
        description="'adapter': the critic is a second LoRA adapter on the policy's backbone (one model in memory); "
        "'model': a separate copy of the model with its own LoRA.",
    )
    critic_model: str | None = Field(None, description="With critic = 'model': the critic's model (default: the model being trained).")
    critic_lr: float = Field(1e-4, gt=0, description="AdamW learning rate of the critic (adapter and value head).")
    critic_lora: LoraOptions | None = Field(None, description="LoRA shape of the critic (default: the policy's).")
    normalize_advantages: bool = Field(True, description="z-score the advantages over the batch (std + 1e-8).")
    negative_advantage_scale: float = Field(
        1.0, ge=0, le=1,
        description="Multiply the policy's negative advantages by this, after z-scoring (0: the policy learns from the steps "
                    "that did better than the critic expected only, as REINFORCE's scale-negative transform; the critic "
                    "learns from every step whatever this is).",
    )
    value_clip: float | None = Field(None, gt=0, description="Clip the new value to within this of the value before the update (PPO-style; None: off).")
