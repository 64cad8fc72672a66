"""``training.colocate`` with vLLM, checked before a run: the engine can sleep on this platform
(else one message: the fallback keeps its memory), and the share of the GPU that
``gpu_memory_utilization`` leaves holds at least the learner's weights, which stay on the GPU
while the engine generates."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("unstable.vllm")

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


def parameter_count(model: str, trust_remote_code: bool = False) -> int | None:
    """Parameters of the model's architecture, counted on the meta device (nothing is loaded);
    None when its config cannot be read here (a hub id without network)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from unstable_hf.loading import resolve_model_path

        config = AutoConfig.from_pretrained(resolve_model_path(model), trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            net = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        return sum(p.numel() for p in net.parameters())
    except Exception:  # noqa: BLE001 - no config here: the check is skipped
        return None


def split_problem(total_bytes: int, utilization: float, learner_bytes: int) -> str | None:
    """Why the GPU share left to the learner cannot hold its weights, or None when it can."""
    left = (1 - utilization) * total_bytes
    if left >= learner_bytes:
        return None
    most = max(0.0, 1 - learner_bytes / total_bytes)
    return (f"training.colocate: gpu_memory_utilization = {utilization:g} leaves {left / 2**30:.1f} GiB of the GPU's "
            f"{total_bytes / 2**30:.1f} GiB to the learner, whose weights alone take {learner_bytes / 2**30:.1f} GiB: "
            f"set it to at most {int(most * 100) / 100:g}")


def check_colocated(options: Any, components: Any) -> None:
    """Raise ValueError when the split cannot work; say once where the engine cannot sleep."""
    from .engine import sleep_mode
    from .inference import NO_SLEEP

    try:
        sleeps = sleep_mode(options)
    except ImportError:  # vllm itself is not installed here: nothing to say of its platform
        return
    if not sleeps:
        log.warning(NO_SLEEP)
    import torch

    learner = components.get("learner")
    if not torch.cuda.is_available() or learner is None or not components.model:
        return
    count = parameter_count(components.model, options.trust_remote_code)
    if count is None:
        return
    total = torch.cuda.get_device_properties(0).total_memory
    problem = split_problem(total, options.gpu_memory_utilization, count * DTYPE_BYTES.get(learner.dtype, 4))
    if problem:
        raise ValueError(problem)
