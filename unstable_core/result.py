"""How a run ended (``RunResult``): what ``run()`` and ``Run.start()`` return."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .records import EvalRecord

RunStatus = Literal["completed", "interrupted", "failed"]


class RunResult(BaseModel):
    """How a run ended."""

    model_config = ConfigDict(extra="forbid")

    status: RunStatus
    run_dir: str
    learner_steps: int = 0
    games_played: int = 0
    eval_records: list[EvalRecord] = Field(default_factory=list, description="Every evaluation (or tournament) record.")
    error: str | None = None
