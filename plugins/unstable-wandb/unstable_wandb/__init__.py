"""unstable plugin: the `wandb` tracker (Weights & Biases)."""

__version__ = "0.1.0"
