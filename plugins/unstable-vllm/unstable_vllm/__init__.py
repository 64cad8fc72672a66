"""unstable-vllm: the `vllm` inference backend (vLLM's async engine, LoRA hot-swap, token ids
and sampled-token logprobs). vLLM is imported only when an engine starts."""

__version__ = "0.1.0"
