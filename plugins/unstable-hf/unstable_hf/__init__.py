"""unstable-hf: transformers + peft for unstable.

Modules: ``plugin`` (hook implementations; imports nothing heavy), ``loading`` (models,
tokenizers, LoRA), ``tiny`` (tiny local models), ``inference`` (the batched ``hf`` backend),
``logprobs`` (memory-bounded token logprobs with a recomputing backward).
"""

__version__ = "0.1.0"
