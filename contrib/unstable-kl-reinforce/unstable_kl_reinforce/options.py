from typing import Literal

from pydantic import Field

from unstable_hf.options import LearnerOptions


class KLReinforceOptions(LearnerOptions):
    kl_coef: float = Field(0.05, ge=0, description="Weight of the per-token KL estimate to the frozen base policy.")
    kl_estimator: Literal["k3", "k1-score"] = Field(
        "k3", description="'k3': GRPO's per-token k3 as a loss term; its gradient is that of KL(ref || pi) at each "
        "token's prefix. 'k1-score': logp times the detached log-ratio to go (sum over the later tokens of logp - "
        "ref), the score-function gradient of KL(pi || ref) over completions: unbiased on completions drawn from pi itself "
        "(on-policy, served at top_p = 1 and the learner's temperature) and with normalizer = 'max_generation_len' "
        "(a constant); normalizer = 'tokens' is refused with it.")
