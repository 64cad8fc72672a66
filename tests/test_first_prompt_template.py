"""A backend that loads its model (and tokenizer) at its first request is prepared before a game
renders its first prompt, so that a template using the tokenizer's chat template renders every
prompt of a run alike, the first game's included."""

from __future__ import annotations

import asyncio

import unstable_core
from unstable_core import Completion, EnvSpec, GameSpec, GenerationRequest, ModelRef
from unstable_core.runtime.game.envcalls import EnvCalls
from unstable_core.runtime.game.runner import GameRunner
from unstable_core.testing import ToyProvider


class MarkupTokenizer:
    chat_template = "markup"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "<user>" + messages[0]["content"] + "<assistant>"


class LazyBackend:
    """Has no tokenizer until its model is loaded: by ``prepare`` or by its first request."""

    def __init__(self) -> None:
        self.tokenizer = None
        self.prompts: list[str] = []

    def prepare(self, ref: ModelRef) -> None:
        self.tokenizer = MarkupTokenizer()

    async def generate(self, request: GenerationRequest) -> Completion:
        self.prepare(request.model)
        self.prompts.append(request.prompt)
        return Completion(text="\\boxed{C}")


def test_the_first_prompt_of_the_first_game_uses_the_chat_template():
    backend = LazyBackend()
    calls = EnvCalls("loop")
    template = unstable_core.build_component("template", "chat")
    runner = GameRunner(ToyProvider(), lambda n: template, lambda name: backend, env_calls=calls)
    seats = [ModelRef(uid="a", backend="lazy", model="m"), ModelRef(uid="b", backend="lazy", model="m")]

    async def play():
        try:
            for seed in (1, 2):
                await runner.play(GameSpec(game_idx=seed, seed=seed, env=EnvSpec(env_id="PickBest-v0"), seats=seats))
        finally:
            calls.close()

    asyncio.run(play())
    assert len(backend.prompts) == 4
    assert all(p.startswith("<user>") and p.endswith("<assistant>") for p in backend.prompts), backend.prompts
