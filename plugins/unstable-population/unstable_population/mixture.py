"""The `mixture` backend: a population's policy as a model that plays like any other. A model
served by it names a run directory (``model``) and a mixture (``options.mixture``: 'uniform',
every checkpoint alike, fictitious play's output; 'meta', the run's PSRO meta mixture); each game
it draws one member per seat with the mixture's weights, from the game's seed, and that member
(a checkpoint, served by the run's own backend with the run's options) plays the whole game.

    [[opponents]]
    uid = "psro-meta"
    backend = "mixture"
    model = "runs/psro-0"
    options = { mixture = "meta" }
"""

from __future__ import annotations

import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from unstable_core import Checkpoint, Completion, GenerationRequest, ModelRef, UnstableError, run_inference, run_mixture


class MixtureModelOptions(BaseModel):
    """The per-model options of a model the mixture backend serves."""

    model_config = ConfigDict(extra="forbid")

    mixture: Literal["uniform", "meta"] = Field(
        "uniform", description="'uniform': every checkpoint of the run (the base model included) alike; 'meta': the "
        "mixture its model sampler targeted (psro's Nash mixture, fictitious's members), as its registry.json holds it."
    )


def members_of(ref: ModelRef) -> list[tuple[ModelRef, float]]:
    """The (model, weight) members of the mixture ``ref`` names; UnstableError naming the run."""
    options = MixtureModelOptions.model_validate(ref.options)
    return run_mixture(ref.model, options.mixture)


def check_model(ref: ModelRef) -> None:
    if not ref.model:
        raise ValueError("the mixture backend's `model` is a run directory with checkpoints, not empty")
    try:
        members_of(ref)
    except UnstableError as exc:
        raise ValueError(str(exc)) from None


def draw(weights: list[float], game_seed: int, player_id: int) -> int:
    """The member a seat plays a whole game with: drawn with ``weights`` from the game's seed and
    the seat, so every turn of the game draws the same one."""
    return random.Random(f"mixture:{game_seed}:{player_id}").choices(range(len(weights)), weights=weights)[0]


class MixtureInference:
    """Serves mixtures of runs' checkpoints through each run's own backend (built once a run)."""

    def __init__(self, build: Any) -> None:
        self.build = build  # BuildContext.build: the inner backends are built in this process
        self.inner: dict[str, Any] = {}  # run dir -> the run's backend
        self.members: dict[tuple[str, str], tuple[list[ModelRef], list[float]]] = {}

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of the first run's backend (the template may use its chat template)."""
        return next((b.tokenizer for b in self.inner.values()), None)

    def backend_of(self, run_dir: str) -> Any:
        if run_dir not in self.inner:
            name, options = run_inference(run_dir)
            self.inner[run_dir] = self.build("inference", name, options)
        return self.inner[run_dir]

    def member(self, request: GenerationRequest) -> ModelRef:
        ref = request.model
        key = (ref.model, str(ref.options.get("mixture", "uniform")))  # validated by members_of, once
        if key not in self.members:
            found = members_of(ref)
            self.members[key] = ([m for m, _ in found], [w for _, w in found])
        models, weights = self.members[key]
        return models[draw(weights, request.game_seed, request.player_id)]

    async def generate(self, request: GenerationRequest) -> Completion:
        member = self.member(request)
        completion: Completion = await self.backend_of(request.model.model).generate(request.model_copy(update={"model": member}))
        return completion.model_copy(update={"trainable": False})

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        raise ValueError("the mixture backend serves runs' populations, not a learner's checkpoints")

    def close(self) -> None:
        for backend in self.inner.values():
            backend.close()
        self.inner.clear()
