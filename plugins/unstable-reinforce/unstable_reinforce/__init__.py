"""unstable-reinforce: the REINFORCE learner of UnstableBaselines, done right."""

__version__ = "0.1.0"
