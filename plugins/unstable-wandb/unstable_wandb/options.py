"""Options of the `wandb` tracker."""

from __future__ import annotations

from pathlib import PurePath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class WandbOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: str = Field("unstable", min_length=1, description="W&B project.")
    entity: str | None = Field(None, description="W&B entity (team or user); None: your default.")
    group: str | None = Field(None, description="Group runs together (e.g. the seeds of one experiment).")
    tags: list[str] = Field(default_factory=list, description="Tags of the W&B run.")
    run_name: str | None = Field(None, description="The W&B run's display name; None: the config's name and the run directory's "
                                 "(`name` picks the tracker).")
    notes: str | None = Field(None, description="Notes shown with the W&B run.")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="online, offline (files only; `wandb sync` later) or disabled; None: WANDB_MODE, else online."
    )
    dir: str | None = Field(None, description="Folder for wandb's own files, inside the run directory (a relative path "
                            "without '..'); None: the run directory itself.")
    transcripts: bool = Field(True, description="Log a table of game transcripts (the games collection.transcripts samples).")
    table_every_s: float = Field(60.0, gt=0, description="Seconds between logs of the transcripts table (new rows only).")
    max_table_rows: int = Field(20_000, ge=0, description="Rows after which no more transcripts are added.")
    init_timeout_s: float = Field(90.0, gt=0, description="Seconds wandb may take to start its service and the run.")

    @field_validator("dir")
    @classmethod
    def _inside_the_run_directory(cls, value: str | None) -> str | None:
        if value is not None and (PurePath(value).is_absolute() or ".." in PurePath(value).parts or not value.strip()):
            raise ValueError(f"{value!r} is not a folder inside the run directory: give a relative path without '..' "
                             "(nothing a run writes goes outside its run directory)")
        return value
