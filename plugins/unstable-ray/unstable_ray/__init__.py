"""unstable-ray: the `ray` executor (see README.md)."""

__version__ = "0.1.0"
