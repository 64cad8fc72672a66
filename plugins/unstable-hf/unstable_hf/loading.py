"""Loading causal LMs and tokenizers (`from_pretrained` on a hub id or local path), LoRA, and the
`tiny:` shorthand that builds a tiny local model on first use."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from unstable_core.progress import task, verbose

from .options import LoraOptions, ModelLoadOptions


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}[name]


def cache_root(options: ModelLoadOptions | None = None) -> Path:
    if options is not None and options.cache_dir:
        return Path(options.cache_dir)
    return Path(os.environ.get("UNSTABLE_CACHE", Path.home() / ".cache" / "unstable"))


def resolve_model_path(name: str, options: ModelLoadOptions | None = None) -> str:
    """A hub id or local path as is; ``tiny:...`` is built (once, cached) and its folder returned."""
    if name.startswith("tiny"):
        from .tiny import TinySpec, ensure_tiny

        spec = TinySpec.parse(name)
        return str(ensure_tiny(spec, cache_root(options)))
    return name


def model_problem(name: str) -> str | None:
    """Why ``from_pretrained(name)`` cannot work here, or None, found without loading anything: a
    local folder (a path that exists, or starts with '/', '.' or '~', or has more than one '/')
    must hold a config.json; a hub id must be in the local Hugging Face cache when the hub is
    offline (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    path = Path(name).expanduser()
    if path.exists() or name.startswith(("/", ".", "~")) or name.count("/") > 1:
        if not path.is_dir():
            return f"model {name!r}: no such folder"
        if not (path / "config.json").is_file():
            return f"model {name!r}: the folder has no config.json (a model saved with save_pretrained has one)"
        return None
    offline = any(os.environ.get(v, "") not in ("", "0", "false") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if offline:
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            return f"model {name!r} is not in the local Hugging Face cache and the hub is offline (HF_HUB_OFFLINE)"
    return None


def quiet_third_party() -> None:
    """Silence transformers' progress bars ("Loading weights", "Writing model shards"), its
    info logging and the deprecation warning peft triggers (``is_gradient_checkpointing``),
    unless ``unstable --verbose``."""
    if verbose():
        return
    import warnings

    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=r".*is_gradient_checkpointing.*", category=FutureWarning)


def load_tokenizer(path: str, options: ModelLoadOptions) -> Any:
    from transformers import AutoTokenizer

    quiet_third_party()

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=options.trust_remote_code)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


_loaded: set[str] = set()  # paths load_causal_lm has loaded in this process
_loaded_lock = threading.Lock()


def load_causal_lm(path: str, options: ModelLoadOptions) -> Any:
    from transformers import AutoModelForCausalLM

    quiet_third_party()
    with _loaded_lock:  # each role loads the model: plain lines for the first load of a path only
        first = path not in _loaded
        _loaded.add(path)
    with task(f"loading {path}", plain=first):
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch_dtype(options.dtype), trust_remote_code=options.trust_remote_code
        )
        # transformers 5 types PreTrainedModel.to through a decorator whose first argument is the model
        return model.to(resolve_device(options.device))  # type: ignore[arg-type]


def lora_config(options: LoraOptions) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=options.rank,
        lora_alpha=options.alpha,  # type: ignore[arg-type]  # annotated int; peft scales by alpha / r, a float works
        lora_dropout=options.dropout,
        target_modules=list(options.target_modules),
        modules_to_save=list(options.modules_to_save) or None,
        task_type="CAUSAL_LM",
    )


def with_lora(model: Any, options: LoraOptions) -> Any:
    """Wrap a model in a fresh peft LoRA adapter named 'default'."""
    from peft import get_peft_model

    modules = [name for name, _ in model.named_modules()]
    for wanted in options.modules_to_save:  # peft would skip a name that matches nothing, silently
        if not any(name.endswith(wanted) for name in modules):  # peft matches by suffix, too
            norms = [name for name in modules if name.endswith("norm")][-3:]
            raise ValueError(f"lora.modules_to_save: {wanted!r} names no module of the model (its last norms: {norms})")
    return get_peft_model(model, lora_config(options))
