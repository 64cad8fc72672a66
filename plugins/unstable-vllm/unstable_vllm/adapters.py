"""The all-zero LoRA adapter that serves the base model beside real adapters (engine.py says why)."""

from __future__ import annotations

from pathlib import Path


def write_zero_adapter(model_path: str, out: str, trust_remote_code: bool = False) -> None:
    """Write a rank-1 adapter whose every weight is zero for the model at `model_path`, on peft's
    default target modules for its architecture. The model is built on the meta device: no
    weights are loaded, so this is quick for any model size."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    peft_model = get_peft_model(model, LoraConfig(r=1, lora_alpha=1, task_type="CAUSAL_LM"))
    state = {name: torch.zeros(tensor.shape, dtype=torch.float32) for name, tensor in get_peft_model_state_dict(peft_model).items()}
    if not state:
        raise RuntimeError(f"peft found no LoRA target modules in {model_path} for the zero adapter")
    Path(out).mkdir(parents=True, exist_ok=True)
    save_file(state, str(Path(out) / "adapter_model.safetensors"))
    peft_model.peft_config["default"].save_pretrained(out)
