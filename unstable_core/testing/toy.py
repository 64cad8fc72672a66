"""The toy game PickBest-v0 (best action known) and a tabular softmax policy, served by the
``tabular`` inference backend and trained by the ``tabular-reinforce`` learner: learning must
visibly happen in seconds, with no torch. ``toy_plugin`` registers all three."""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .. import hookimpl
from ..components import EnvProviderSpec, InferenceSpec, LearnerSpec
from ..runtime.rundir.jsonio import write_json_atomic
from ..types import Batch, Checkpoint, Completion, EnvSpec, GenerationRequest

# ---------------------------------------------------------------------------------------------
# Toy game: PickBest
# ---------------------------------------------------------------------------------------------

TOY_ACTIONS = ["A", "B", "C", "D"]
TOY_BEST = "C"


class PickBestGame:
    """Two players pick a letter in turn. Whoever picks the best letter (C) while the other does
    not wins (+1 / -1); otherwise it is a draw. An unknown letter is an invalid move and loses."""

    def __init__(self, best: str = TOY_BEST, actions: list[str] | None = None) -> None:
        self.best = best
        self.actions = actions or list(TOY_ACTIONS)

    def reset(self, num_players: int, seed: int) -> None:
        self.n = num_players
        self.picks: dict[int, str] = {}
        self.current = 0
        self.invalid_by: int | None = None

    def observe(self) -> tuple[int, str]:
        opts = ", ".join(f"'[{a}]'" for a in self.actions)
        return self.current, f"You are Player {self.current}. Pick the best letter.\nAvailable moves: {opts}"

    def step(self, action: str) -> tuple[bool, bool]:
        letter = action.strip().strip("[]").strip().upper()
        if letter not in self.actions:
            self.invalid_by = self.current
            return True, True
        self.picks[self.current] = letter
        self.current += 1
        return self.current >= self.n, False

    def close(self) -> tuple[dict[int, float], dict[int, dict[str, Any]]]:
        info = {p: {"invalid_move": p == self.invalid_by} for p in range(self.n)}
        if self.invalid_by is not None:
            return {p: (-1.0 if p == self.invalid_by else 1.0) for p in range(self.n)}, info
        good = {p for p, a in self.picks.items() if a == self.best}
        if len(good) == 1:
            (w,) = good
            return {p: (1.0 if p == w else -1.0) for p in range(self.n)}, info
        return {p: 0.0 for p in range(self.n)}, info


class ToyProvider:
    def make(self, env: EnvSpec) -> PickBestGame:
        if not env.env_id.startswith("PickBest"):
            raise ValueError(f"toy provider has no env {env.env_id!r}")
        return PickBestGame(**env.kwargs)

    def known_env_ids(self) -> list[str]:
        return ["PickBest-v0"]


# ---------------------------------------------------------------------------------------------
# Tabular softmax policy: inference + learner sharing a JSON checkpoint format
# ---------------------------------------------------------------------------------------------


def _softmax(logits: list[float]) -> list[float]:
    m = max(logits)
    e = [math.exp(x - m) for x in logits]
    s = sum(e)
    return [x / s for x in e]


def load_table(path: str | None) -> dict[str, list[float]]:
    if not path:
        return {}
    with open(os.path.join(path, "table.json"), encoding="utf-8") as fh:
        return json.load(fh)["logits"]


def toy_probabilities(table: dict[str, list[float]], key: str = "pick") -> list[float]:
    return _softmax(table.get(key, [0.0] * len(TOY_ACTIONS)))


class TabularInference:
    """Samples a letter from softmax(logits); token id = letter index; logprob returned."""

    tokenizer = None

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, list[float]]] = {}

    async def generate(self, request: GenerationRequest) -> Completion:
        ref = request.model
        if ref.uid not in self.tables:
            self.tables[ref.uid] = load_table(ref.adapter_path)
        probs = toy_probabilities(self.tables[ref.uid])
        a = random.Random(request.seed).choices(range(len(TOY_ACTIONS)), weights=probs)[0]
        return Completion(
            text=f"\\boxed{{{TOY_ACTIONS[a]}}}",
            prompt_token_ids=[0],
            completion_token_ids=[a],
            logprobs=[math.log(probs[a])],
            policy_version=ref.version,
        )

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        self.tables[checkpoint.uid] = load_table(checkpoint.path)
        return checkpoint.version

    def close(self) -> None:
        pass


class TabularOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lr: float = Field(0.5, gt=0, description="Step size on the logits.")


class TabularLearner:
    """REINFORCE on a softmax table: logits += lr * mean(reward * (onehot(a) - probs))."""

    def __init__(self, options: TabularOptions) -> None:
        self.lr = options.lr
        self.logits = [0.0] * len(TOY_ACTIONS)
        self.version = 0
        self.batches: list[Batch] = []

    def update(self, batch: Batch) -> dict[str, float]:
        probs = _softmax(self.logits)
        grad = [0.0] * len(self.logits)
        for s in batch.steps:
            a = s.turn.completion_token_ids[0]
            for i in range(len(grad)):
                grad[i] += s.reward * ((i == a) - probs[i]) / len(batch.steps)
        self.logits = [x + self.lr * g for x, g in zip(self.logits, grad)]
        self.version += 1
        self.batches.append(batch)
        return {"p_best": _softmax(self.logits)[TOY_ACTIONS.index(TOY_BEST)], "grad_norm": math.sqrt(sum(g * g for g in grad))}

    def state_dict(self) -> dict[str, Any]:
        return {"logits": list(self.logits), "version": self.version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.logits, self.version = list(state["logits"]), state["version"]

    def save_checkpoint(self, directory: str, uid: str) -> Checkpoint:
        write_json_atomic(Path(directory) / "table.json", {"logits": {"pick": self.logits}, "version": self.version})
        return Checkpoint(uid=uid, version=self.version, path=directory)


class ToyPlugin:
    """The toy env, inference and learner as one plugin object."""

    @hookimpl
    def unstable_envs(self) -> list[EnvProviderSpec]:
        return [EnvProviderSpec(name="toy", summary="Toy games with a known best action (PickBest-v0)", factory=lambda o, ctx: ToyProvider())]

    @hookimpl
    def unstable_inference_backends(self) -> list[InferenceSpec]:
        return [InferenceSpec(name="tabular", summary="Tabular softmax policy over the toy game's letters", factory=lambda o, ctx: TabularInference())]

    @hookimpl
    def unstable_learners(self) -> list[LearnerSpec]:
        return [LearnerSpec(name="tabular-reinforce", summary="REINFORCE on a softmax table", config=TabularOptions,
                            factory=lambda o, ctx: TabularLearner(o), drop_zero_advantage=True)]


toy_plugin = ToyPlugin()


def toy_config(**overrides: Any) -> dict[str, Any]:
    """A RunConfig dict: the tabular policy learns PickBest-v0 by self-play, evaluated against
    ``random-valid``."""
    cfg: dict[str, Any] = {
        "name": "toy",
        "seed": 0,
        "env": {"name": "toy"},
        "train_envs": [{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 2}],
        "model": {"model": "tabular", "backend": "tabular"},
        "opponents": ["random-valid"],
        "learner": {"name": "tabular-reinforce", "lr": 1.0},
        "inference": {"name": "tabular"},
        "buffer": {"name": "step", "capacity": 256},
        "collection": {"num_train_games": 8, "num_eval_games": 8, "eval_games": 40},
        "training": {"learning_steps": 20, "batch_size": 16, "eval_every": 10},
        "trackers": [{"name": "jsonl"}],
    }
    for key, value in overrides.items():
        cfg[key] = value
    return cfg

