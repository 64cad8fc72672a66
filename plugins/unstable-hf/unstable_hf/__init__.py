"""unstable-hf: transformers + peft for unstable.

Modules: ``plugin`` (hook implementations; imports nothing heavy), ``loading`` (models,
tokenizers, LoRA), ``tiny`` (tiny local models), ``inference`` (the batched ``hf`` backend),
``logprobs`` (memory-bounded token logprobs with a recomputing backward), ``sampling`` (every
request samples from its own seed), ``training`` (the learner toolkit: ``LoraLearner``,
``Policy``, ``pack``; ``packing`` and ``policy`` hold its pieces).
"""

__version__ = "0.1.0"
