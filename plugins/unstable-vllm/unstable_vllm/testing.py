"""References for checking the vllm backend against transformers + peft (tests and bench/):
random non-zero LoRA adapters, teacher-forced token logprobs and greedy decoding in float32."""

from __future__ import annotations

from typing import Any

from unstable_hf.options import SEVEN_PROJECTIONS


def write_random_adapter(model_path: str, out: str, rank: int = 8, scale: float = 0.3, seed: int = 1) -> str:
    """Save a LoRA adapter whose A and B are both random (a fresh peft adapter has B = 0, which
    would not change the model), so that served outputs visibly depend on it."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=SEVEN_PROJECTIONS, task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    peft_model.save_pretrained(out)
    return out


class HFReference:
    """The model (and optionally an adapter) in transformers + peft, float32 on the CPU."""

    def __init__(self, model_path: str, adapter_path: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        model: Any = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        if adapter_path:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter_path)
        self.model = model.eval()

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0) -> list[float]:
        """log p(completion token | everything before it) at `temperature`, teacher-forced."""
        import torch

        ids = torch.tensor([prompt_ids + completion_ids])
        with torch.no_grad():
            logits = self.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
        logp = torch.log_softmax(logits / temperature, dim=-1)
        return [float(logp[i, t]) for i, t in enumerate(completion_ids)]

    def greedy(self, prompt_ids: list[int], max_new_tokens: int, eos_token_id: int) -> list[int]:
        import torch

        with torch.no_grad():
            out = self.model.generate(
                input_ids=torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=eos_token_id,
                temperature=None, top_p=None, top_k=None,
            )
        return [int(t) for t in out[0, len(prompt_ids) :]]


def max_abs_diff(a: list[Any], b: list[Any]) -> float:
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
