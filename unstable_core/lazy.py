"""Names of a module imported on first use, so that importing the module stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(module: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` that imports ``name`` from
    ``unstable_core.<table[name]>`` on first use and keeps it in the module's namespace."""
    namespace = importlib.import_module(module).__dict__

    def __getattr__(name: str) -> Any:
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(f"unstable_core.{source}"), name)
        return value

    return __getattr__
