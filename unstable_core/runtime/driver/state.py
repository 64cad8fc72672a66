"""What the driver counts over a run, and what every stage of it works with (``RunContext``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ...config import RunConfig
from ...executors import RoleHandles
from ...plugins import PluginSystem
from ...records import EvalRecord
from ...types import Checkpoint
from ..rundir.output import RunOutput
from .stats import CollectionStats


@dataclass
class DriverState:
    """The driver's counters; a run snapshot holds them (``snapshots.py``)."""

    step: int = 0  # learner updates made
    games_played: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    failures_in_a_row: int = 0
    dropped: int = 0
    empty_batches: int = 0
    eval_records: list[EvalRecord] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)  # every one saved, oldest first
    resumed: bool = False  # went on from a snapshot
    restarts: int = 0  # roles the executor restarted in this leg of the run (not in snapshots)
    stats: CollectionStats = field(default_factory=CollectionStats)
    reported_pairs: dict[tuple[str, str], int] = field(default_factory=dict)  # each pair's games in the ratings records so far

    @property
    def last_checkpoint(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None


@dataclass
class RunContext:
    """What the stages of one run share: its config and directory, the role handles, the run
    output (files and trackers), the plugin system (lifecycle hooks) and the counters."""

    cfg: RunConfig
    run_dir: str
    roles: RoleHandles
    out: RunOutput
    system: PluginSystem
    state: DriverState = field(default_factory=DriverState)

    @property
    def sync(self) -> bool:
        return self.cfg.collection.mode == "sync"
