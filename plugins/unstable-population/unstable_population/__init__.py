"""unstable-population: opponent samplers over the league's whole population of checkpoints."""

__version__ = "0.1.0"
