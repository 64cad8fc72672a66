"""The buffer role: the reward pipelines and the buffer.

``add(results)`` turns each finished game into steps with the final and step transforms applied
(by the core, so a third-party buffer cannot forget them) and stores them; ``draw(n, version)``
takes steps out, measures the spread of their groups (``groups.group_spread``, logged with the
update), applies the sampling transforms, turns each step answered among choices into a
row per choice (``choices.py``: ``collection.answers = "choice"``) and drops the steps the learner declared
useless (``LearnerSpec.drop_zero_advantage``, overridden by ``training.filter_zero_advantage``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...choices import expand_choices
from ...errors import ComponentError
from ...groups import group_spread
from ...state import load_into, state_of
from ...types import Batch, GameResult, Step
from ..building import Builder, guarded
from ..plan import RunPlan
from .rewards import RewardPipelines

if TYPE_CHECKING:  # pragma: no cover
    from ...plugins import PluginSystem


class BufferRole:
    def __init__(self, plan: RunPlan, system: PluginSystem) -> None:
        self.builder = builder = Builder(plan, system)
        reward = plan.config.reward
        keys = [[f"reward.{stage}.{i}" for i in range(len(getattr(reward, stage)))] for stage in ("final", "step", "sampling")]
        final, step, sampling = ([builder.build(key) for key in stage] for stage in keys)
        self.rewards = RewardPipelines(final, step, sampling, labels=[builder.label(k) for stage in keys for k in stage])
        self.buffer = builder.build("buffer")
        self.label = builder.label("buffer")
        self._capacity = int(self.buffer.capacity)
        choice = plan.config.training.filter_zero_advantage
        declared = plan.trains and builder.spec("learner").drop_zero_advantage
        #: whether a drawn batch keeps only the steps with a nonzero reward (advantage)
        self.drop_zero_advantage = declared if choice is None else choice
        self.choice_mass = plan.config.collection.choice_mass

    async def add(self, results: list[GameResult]) -> int:
        """Store the trained seats of the finished training games; return the steps stored.
        The games of a group (``collection.group_size``; scheduled, played and taken in
        together) are handed to the buffer as one episode, which it keeps whole."""
        added = 0
        groups: dict[int, list[Step]] = {}
        for result in results:
            if result.game.mode != "train":
                continue
            episodes = self.rewards.episodes(result)
            if result.game.group_id is not None:
                groups.setdefault(result.game.group_id, []).extend(s for episode in episodes for s in episode)
            elif episodes:
                added += guarded(self.label, "add", self.buffer.add, episodes)
        grouped = [steps for steps in groups.values() if steps]
        if grouped:
            added += guarded(self.label, "add", self.buffer.add, grouped)
        return added

    async def draw(self, n: int, learner_version: int) -> Batch:
        steps = guarded(self.label, "draw", self.buffer.draw, n)
        if not isinstance(steps, list) or not all(isinstance(s, Step) for s in steps):
            raise ComponentError(f"{self.label}: draw returned {type(steps).__name__}; expected a list of Step")
        figures = group_spread(steps)  # the rewards the group baseline compares, before the sampling transforms
        steps = expand_choices(self.rewards.sampling(steps), self.choice_mass)  # answers drawn among choices: a row each
        if not self.drop_zero_advantage:
            return Batch(steps=steps, learner_version=learner_version, figures=figures)
        keep = [s for s in steps if s.reward != 0.0]
        return Batch(steps=keep, learner_version=learner_version, dropped=len(steps) - len(keep), figures=figures)

    async def capacity(self) -> int:
        return self._capacity

    async def size(self) -> int:
        return int(self.buffer.size())

    async def state_dict(self) -> dict[str, Any]:
        """The buffer's state and every Stateful reward transform's (a role baseline, say)."""
        return {"buffer": state_of(self.buffer), "transforms": [state_of(t) for t in self.rewards.transforms()]}

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        load_into(self.buffer, state["buffer"])
        for transform, saved in zip(self.rewards.transforms(), state["transforms"]):
            load_into(transform, saved)
