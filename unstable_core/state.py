"""State that survives a restart: the ``Stateful`` protocol and helpers.

A component with state (a learner's weights and optimizer, a buffer's steps, a sampler's scores,
an RNG stream) implements ``state_dict()`` / ``load_state_dict(state)``, like torch modules. The
core saves every role's state at learner-step boundaries (``RUN_DIR/state/step-N/``) and loads it
into freshly built components on ``unstable run --resume``.

A state is a dict of JSON values (str, int, float, bool, None, lists, dicts with str keys) and
torch tensors anywhere inside it: tensors go to a safetensors file, the rest to JSON. Nothing is
pickled, and loading a snapshot executes nothing. A component without ``state_dict`` is rebuilt
fresh on resume (and named in the ``resume`` record).
"""

from __future__ import annotations

import random
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: JSON values and torch tensors."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned, into a component built from the same options."""
        ...


def rng_state(rng: random.Random) -> list[Any]:
    """A ``random.Random``'s state as JSON values (``set_rng_state`` restores it)."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def set_rng_state(rng: random.Random, state: list[Any]) -> None:
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


def state_of(component: Any) -> dict[str, Any] | None:
    """``component.state_dict()`` when it has one, else None."""
    return component.state_dict() if isinstance(component, Stateful) else None


def load_into(component: Any, state: dict[str, Any] | None) -> None:
    """Load a saved state into a component that is Stateful (no-op for None)."""
    if state is not None and isinstance(component, Stateful):
        component.load_state_dict(state)
