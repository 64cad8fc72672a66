from pydantic import Field

from unstable_hf.options import LearnerOptions


class KLReinforceOptions(LearnerOptions):
    kl_coef: float = Field(0.05, ge=0, description="Weight of the per-token KL estimate to the frozen base policy.")
