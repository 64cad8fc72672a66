"""The learner role: ``update(batch) -> metrics`` and ``save(directory, uid) -> Checkpoint``.

A learner that declares ``blocking`` on its record is updated in a worker thread, so the event
loop of the process it runs in (games, in the local executor) keeps going."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

from ...errors import ComponentError, RunFailed
from ...state import load_into, state_of
from ...types import Batch, Checkpoint
from ..building import Builder, guarded
from ..plan import RunPlan

if TYPE_CHECKING:  # pragma: no cover
    from ...plugins import PluginSystem


class LearnerRole:
    def __init__(self, plan: RunPlan, system: PluginSystem) -> None:
        self.builder = builder = Builder(plan, system)
        self.learner = builder.build("learner")
        self.label = builder.label("learner")
        self.blocking = builder.spec("learner").blocking
        self.allow_non_finite = plan.config.training.allow_non_finite

    async def update(self, batch: Batch) -> dict[str, float]:
        if self.blocking:
            metrics = await asyncio.to_thread(guarded, self.label, "update", self.learner.update, batch)
        else:
            metrics = guarded(self.label, "update", self.learner.update, batch)
        if not isinstance(metrics, dict):
            raise ComponentError(f"{self.label}: update returned {type(metrics).__name__}; expected a dict of floats")
        out = {}
        for key, value in metrics.items():
            if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ComponentError(f"{self.label}: update returned metric {key!r} = {value!r}; expected a number")
            out[key] = float(value)
            if not math.isfinite(out[key]) and not self.allow_non_finite:
                raise RunFailed(f"{self.label}: update reported {key} = {out[key]}: the policy may be ruined; the run stops "
                                "(training.allow_non_finite = true lets it go on)")
        return out

    async def save(self, directory: str, uid: str) -> Checkpoint:
        if self.blocking:
            ckpt = await asyncio.to_thread(guarded, self.label, "save_checkpoint", self.learner.save_checkpoint, directory, uid)
        else:
            ckpt = guarded(self.label, "save_checkpoint", self.learner.save_checkpoint, directory, uid)
        if not isinstance(ckpt, Checkpoint):
            raise ComponentError(f"{self.label}: save_checkpoint returned {type(ckpt).__name__}; expected a Checkpoint")
        return ckpt

    async def state_dict(self) -> dict[str, Any]:
        return {"learner": await self._call("state_dict", state_of, self.learner)}

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        await self._call("load_state_dict", load_into, self.learner, state["learner"])

    async def _call(self, what: str, fn: Any, *args: Any) -> Any:
        if self.blocking:  # a learner's state is its weights: moved in a worker thread
            return await asyncio.to_thread(guarded, self.label, what, fn, *args)
        return guarded(self.label, what, fn, *args)
