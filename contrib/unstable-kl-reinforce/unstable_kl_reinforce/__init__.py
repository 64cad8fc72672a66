"""unstable-kl-reinforce: a third-party-style algorithm plugin (REINFORCE + KL to the base policy)."""

__version__ = "0.1.0"
