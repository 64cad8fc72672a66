"""templates: prompt rendering plus action extraction, as in UnstableBaselines.

Extraction takes the last ``\\boxed{...}`` of the completion and wraps it as ``[x]`` unless it
already has brackets; ``format_ok`` says whether a boxed answer was found. Without one the whole
completion (stripped) is sent to the environment, which usually rejects it.
"""

from __future__ import annotations

import re
from typing import Any

from .. import hookimpl
from ..components import TemplateSpec

INSTRUCTION = "You are playing a two-player zero-sum game. Make valid actions to win."
ANSWER = "Please reason step by step, and put your final answer within \\boxed{}."

#: name -> (summary, format string with {observation})
TEMPLATES: dict[str, tuple[str, str]] = {
    "default": (
        "Plain text: instruction, observation, boxed-answer request",
        f"{INSTRUCTION}\nObservation: {{observation}}\n{ANSWER}",
    ),
    "qwen3-zs": (
        "Qwen3 chat markup, zero-shot",
        f"<|im_start|>user\n{INSTRUCTION}\nObservation: {{observation}}\n{ANSWER}<|im_end|>\n<|im_start|>assistant\n",
    ),
    "qwen3-sp": (
        "Qwen3 chat markup with a system prompt",
        "<|im_start|>system\nYou are a competitive game player. Make sure you read the game instructions "
        "carefully, and always follow the required format.<|im_end|>\n"
        f"<|im_start|>user\n{{observation}}\n{ANSWER}<|im_end|>\n<|im_start|>assistant\n",
    ),
    "qwen3-reasoning": (
        "Qwen3 chat markup opening a <think> block",
        f"<|im_start|>user\n{INSTRUCTION}\nObservation: {{observation}}\n{ANSWER}<|im_end|>\n<|im_start|>assistant\n<think>",
    ),
    "gemma3-zs": (
        "Gemma 3 chat markup, zero-shot",
        f"<bos><start_of_turn>user\n{INSTRUCTION}\nObservation: {{observation}}\n{ANSWER}<end_of_turn>\n<start_of_turn>model\n",
    ),
    "llama-instruct-zs": (
        "Llama 3 instruct chat markup, zero-shot",
        f"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{INSTRUCTION}<|eot_id|>"
        f"<|start_header_id|>user<|end_header_id|>\n\nCurrent Observation: {{observation}}\n{ANSWER}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
}

BOXED = re.compile(r"\\boxed\{(.*?)\}", re.DOTALL)


def boxed_answer(label: str) -> str:
    """The answer the built-in templates read as ``label``: ``\\boxed{label}``."""
    return f"\\boxed{{{label}}}"


def extract_boxed_action(completion: str) -> tuple[str, bool]:
    """(action, format_ok): the last ``\\boxed{...}`` wrapped in brackets unless it has them."""
    matches = BOXED.findall(completion)
    if not matches:
        return completion.strip(), False
    last = matches[-1].strip()
    action = last if ("[" in last and "]" in last) else f"[{last}]"
    return action, True


class FormatTemplate:
    """A template rendered by ``str.format`` with the observation."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self._parts = fmt.split("{observation}")

    def render(self, observation: str, tokenizer: Any = None) -> str:
        return observation.join(self._parts)

    def extract(self, completion: str) -> tuple[str, bool]:
        return extract_boxed_action(completion)


class ChatTemplate(FormatTemplate):
    """Uses the tokenizer's own chat template when the backend has a tokenizer."""

    def __init__(self) -> None:
        super().__init__(TEMPLATES["default"][1])

    def render(self, observation: str, tokenizer: Any = None) -> str:
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            return super().render(observation)
        messages = [{"role": "user", "content": f"{INSTRUCTION}\nObservation: {observation}\n{ANSWER}"}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _format_factory(fmt: str) -> Any:
    return lambda options, ctx: FormatTemplate(fmt)


@hookimpl
def unstable_templates() -> list[TemplateSpec]:
    specs = [
        TemplateSpec(name=name, summary=summary, factory=_format_factory(fmt)) for name, (summary, fmt) in TEMPLATES.items()
    ]
    specs.append(
        TemplateSpec(
            name="chat",
            summary="The tokenizer's chat template (plain 'default' text without a tokenizer)",
            factory=lambda options, ctx: ChatTemplate(),
        )
    )
    return specs
