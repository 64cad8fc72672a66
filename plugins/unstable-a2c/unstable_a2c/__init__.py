"""unstable-a2c: advantage actor-critic on a LoRA causal LM, with what UnstableBaselines' A2C gets
wrong fixed (the critic reads the state, GAE per player, the final reward only at the last turn).

Modules: ``plugin`` (hook implementations; imports nothing heavy), ``options``, ``gae``
(per-turn rewards and generalized advantage estimation, pure Python), ``critic`` (value head on a
LoRA adapter of the shared backbone or on a separate model), ``learner``.
"""

__version__ = "0.1.0"
