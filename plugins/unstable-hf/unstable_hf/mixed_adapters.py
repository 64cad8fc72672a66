"""Several LoRA adapters of one base model in one ``generate`` call.

A population sampler (fictitious play, PSRO) puts many checkpoints in the seats of the games in
flight: served one ``generate`` call per adapter, a batch of 16 prompts over 8 checkpoints is 8
calls of 2 prompts. Here the batch is one call: the base model runs over every row (peft's
adapters disabled, for good), and each LoRA layer adds its rows' adapters in two products over the
adapters side by side (punica's layout): ``x @ A_all.T`` (the K adapters' ranks stacked), each
row's own block kept (a 0/1 mask; a row of the base model keeps none), ``@ (B_all * scaling).T``.
The cost is that of one adapter of rank K x r, whatever K; no weight is copied per row. A module
an adapter saves whole (``modules_to_save``: the tiny model's trained final norm) runs each
adapter's copy over that adapter's rows. peft's own mixed batches (``adapter_names``) split every
layer into one sub-batch per adapter, which on the kuhn-tiny model gained 1.1x at 4 and at 16
adapters (``bench/mixed_adapters.py``), and refuse a saved norm.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

BASE = "__base__"  # a row of the base model (no adapter)
_ROWWISE = ("Linear", "Embedding", "LayerNorm")  # a saved module that maps each row on its own (and *RMSNorm)


def _rowwise(module: Any) -> bool:
    name = type(module).__name__
    return name in _ROWWISE or name.endswith("RMSNorm")


_found: weakref.WeakKeyDictionary[Any, tuple[tuple[str, ...], Any]] = weakref.WeakKeyDictionary()


def _layers(model: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """The model's LoRA linear layers, other LoRA layers, and wrappers of modules saved whole
    (looked up again only when its adapters changed: the walk visits every resident adapter's modules)."""
    from peft.tuners.lora import Linear, LoraLayer
    from peft.utils.other import ModulesToSaveWrapper

    adapters = tuple(model.peft_config)
    if model in _found and _found[model][0] == adapters:
        return _found[model][1]
    modules = list(model.modules())
    linear = [m for m in modules if isinstance(m, Linear)]
    other = [m for m in modules if isinstance(m, LoraLayer) and not isinstance(m, Linear)]
    found = linear, other, [m for m in modules if isinstance(m, ModulesToSaveWrapper)]
    _found[model] = (adapters, found)
    return found


def unsupported(model: Any) -> str | None:
    """Why rows of different adapters cannot share a call to this model (None: they can)."""
    linear, other, saved = _layers(model)
    if other:
        return f"LoRA on a {type(other[0].get_base_layer()).__name__}"
    if any(layer.lora_variant for layer in linear):
        return "a LoRA variant (DoRA)"
    if any(getattr(layer, "lora_bias", {}).get(name) for layer in linear for name in layer.lora_A):
        return "LoRA with a bias"
    odd = [w for w in saved if not _rowwise(w.original_module)]
    return f"a saved {type(odd[0].original_module).__name__} (modules_to_save)" if odd else None


@contextlib.contextmanager
def mixed(model: Any, names: list[str]) -> Iterator[None]:
    """Within: a forward of ``model`` over a batch whose row i is served by adapter ``names[i]``
    (``BASE``: none), each adapter resident. peft's own adapters must be off
    (``model.base_model.disable_adapter_layers()``, once: the hf backend keeps them off for good,
    since peft's ``disable_adapter`` and ``set_adapter`` walk every resident adapter at each call)."""
    import torch

    linear, _, saved = _layers(model)
    adapters = [n for n in dict.fromkeys(names) if n != BASE]
    rows = {n: [i for i, m in enumerate(names) if m == n] for n in adapters}
    handles = []
    for layer in linear:
        present = [n for n in adapters if n in layer.lora_A]
        if present:
            handles.append(layer.register_forward_hook(_lora_hook(layer, present, rows, len(names), torch), with_kwargs=True))
    for wrapper in saved:
        own = {n: r for n, r in rows.items() if n in wrapper.modules_to_save}
        if own:
            handles.append(wrapper.register_forward_hook(_saved_hook(wrapper, own), with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _lora_hook(layer: Any, present: list[str], rows: dict[str, list[int]], batch: int, torch: Any) -> Any:
    """A forward hook adding each row's adapter's LoRA to the layer's base output."""
    a_all = torch.cat([layer.lora_A[n].weight for n in present])  # [sum of ranks, in]
    b_all = torch.cat([layer.lora_B[n].weight * layer.scaling[n] for n in present], dim=1)  # [out, sum of ranks]
    keep = torch.zeros(batch, a_all.shape[0], dtype=a_all.dtype, device=a_all.device)
    start = 0
    for n in present:
        rank = layer.lora_A[n].weight.shape[0]
        keep[rows[n], start : start + rank] = 1
        start += rank

    def hook(module: Any, args: Any, kwargs: Any, out: Any) -> Any:
        x = _input(args, kwargs).to(a_all.dtype)
        mask = keep[:, None, :] if x.dim() == 3 else keep
        return out + ((x @ a_all.T) * mask @ b_all.T).to(out.dtype)

    return hook


def _input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The hidden states a layer was called with: its first argument, by position or by name (a
    LoRA layer's ``x``, or a saved module's one keyword argument)."""
    if args:
        return args[0]
    if "x" in kwargs:
        return kwargs["x"]
    (x,) = kwargs.values()
    return x


def _saved_hook(wrapper: Any, rows: dict[str, list[int]]) -> Any:
    """A forward hook giving each adapter's rows its own copy of a module saved whole."""

    def hook(module: Any, args: Any, kwargs: Any, out: Any) -> Any:
        x = _input(args, kwargs)
        out = out.clone()
        for n, r in rows.items():
            out[r] = wrapper.modules_to_save[n](x[r])
        return out

    return hook


def generate_calls(items: list[Any], key_of: Any, adapter_of: Any, most: int) -> list[list[Any]]:
    """``items`` grouped by ``key_of`` (the base model alone: its adapters mixed; or the base
    model and adapter), each group of one base model cut into ``chunks`` of ``most`` adapters."""
    groups: dict[Any, list[Any]] = {}
    for item in items:
        groups.setdefault(key_of(item), []).append(item)
    return [c for key, group in groups.items() for c in (chunks(group, adapter_of, most) if len(key) == 1 else [group])]


def chunks(items: list[Any], adapter_of: Any, most: int) -> list[list[Any]]:
    """``items`` packed into the fewest calls of at most ``most`` distinct adapters each
    (``adapter_of(item)``: its adapter, None for the base model, which needs none and goes with
    the first call); each adapter's items together, adapters in the order they first come."""
    by_adapter: dict[Any, list[Any]] = {}
    for item in items:
        by_adapter.setdefault(adapter_of(item), []).append(item)
    base = by_adapter.pop(None, [])
    adapters = list(by_adapter)
    calls = [sum((by_adapter[a] for a in adapters[k : k + most]), []) for k in range(0, len(adapters), most)] or [[]]
    calls[0] = base + calls[0]
    return calls
