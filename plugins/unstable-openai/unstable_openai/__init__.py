"""unstable plugin: the `openai` inference backend (any OpenAI-compatible API)."""

__version__ = "0.1.0"
