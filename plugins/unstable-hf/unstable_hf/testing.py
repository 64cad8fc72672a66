"""Test helpers for plugins built on unstable-hf: a small tiny-model spec that builds in seconds."""

from __future__ import annotations

from pathlib import Path

#: no warm start, small corpus: builds in a few seconds on a CPU
FAST_TINY = "tiny:KuhnPoker-v0-train?sft_steps=0&corpus_games=30&hidden=64&heads=2&kv_heads=1&intermediate=128&vocab_size=512"


def build_fast_tiny(root: Path, spec: str = FAST_TINY) -> str:
    """Build (or reuse) the tiny model of `spec` under `root`; return its folder."""
    from .tiny import TinySpec, ensure_tiny

    return str(ensure_tiny(TinySpec.parse(spec), Path(root)))
