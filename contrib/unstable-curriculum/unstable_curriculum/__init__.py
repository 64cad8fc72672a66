"""unstable-curriculum: a curriculum env sampler (a contrib plugin of unstable)."""

__version__ = "0.1.0"
