"""How a run ended (``RunResult``): what ``run()`` and ``Run.start()`` return, with what the run
left behind: its checkpoints, the final ratings, and its history read back as typed records."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import UnstableError
from .records import EvalRecord, TrainRecord
from .types import Checkpoint

RunStatus = Literal["completed", "interrupted", "failed"]


class RunResult(BaseModel):
    """How a run ended."""

    model_config = ConfigDict(extra="forbid")

    status: RunStatus
    run_dir: str
    learner_steps: int = 0
    games_played: int = 0
    eval_records: list[EvalRecord] = Field(default_factory=list, description="Every evaluation (or tournament) record.")
    checkpoints: list[Checkpoint] = Field(default_factory=list, description="The checkpoints in the run directory, oldest first.")
    ratings: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="The final ratings: uid -> the rater's numbers (score; mu and sigma with trueskill).")
    error: str | None = None

    def __repr__(self) -> str:
        counts = f"{self.learner_steps} learner steps, {self.games_played:,} games, {len(self.eval_records)} evaluations"
        error = f", error={self.error[:60]!r}" if self.error else ""
        return f"RunResult({self.status}, {counts}, {len(self.checkpoints)} checkpoints, run_dir={self.run_dir!r}{error})"

    __str__ = __repr__

    def train_records(self) -> list[TrainRecord]:
        """Every learner update of the run, read back from its ``metrics.jsonl`` (the ``jsonl``
        tracker's log; empty without it)."""
        return [TrainRecord.model_validate(r) for r in self._records("train")]

    def to_pandas(self, kind: Literal["eval", "train"] = "eval") -> Any:
        """The evaluations (or the learner updates) as a pandas DataFrame, a row a record
        (needs pandas)."""
        try:
            import pandas
        except ImportError:
            raise UnstableError("RunResult.to_pandas needs pandas: pip install pandas") from None
        rows = [r.model_dump() for r in (self.eval_records if kind == "eval" else self.train_records())]
        return pandas.DataFrame(rows)

    def _records(self, kind: str) -> list[dict[str, Any]]:
        from .dashboard.watch import MetricsFollower  # its complete lines; one cut by a crash is left out

        records, _ = MetricsFollower(Path(self.run_dir) / "metrics.jsonl").read()
        return [r for r in records if r.get("type") == kind]
