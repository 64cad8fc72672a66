"""Options of the `ray` executor (the `[executor]` table of a run config)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Resources(BaseModel):
    """What one actor of a role reserves in the run's placement group."""

    model_config = ConfigDict(extra="forbid")

    num_cpus: float = Field(1.0, ge=0, le=1024)
    num_gpus: float = Field(0.0, ge=0, le=64)


def _resources(role: str, cpus: float) -> Field:  # type: ignore[valid-type]
    return Field(default_factory=lambda: Resources(num_cpus=cpus, num_gpus=0.0),
                 description=f"What the {role} reserves: num_cpus, num_gpus (fractions allowed).")


#: roles the driver builds in its own process unless `in_driver` says otherwise
IN_DRIVER_BY_DEFAULT: list[Literal["league", "buffer"]] = ["league", "buffer"]


class RayOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None, description="Cluster to connect to (`auto`, `ray://host:10001`, `host:6379`). Default: the Ray already "
        "initialised in this process, else a local one started for the run and stopped after it.")
    num_cpus: int | None = Field(None, ge=1, le=4096, description="CPUs of a local cluster started for the run (default: all).")
    namespace: str = Field("unstable", min_length=1, max_length=64, description="Ray namespace of the run's actors.")
    rollout_replicas: int = Field(1, ge=1, le=256, description="Rollout actors, each with its own inference backends.")
    rollout: Resources = _resources("each rollout replica", 1.0)
    learner: Resources = _resources("learner", 1.0)
    league: Resources = _resources("league", 0.0)
    buffer: Resources = _resources("buffer", 0.0)
    in_driver: list[Literal["league", "buffer"]] = Field(
        default_factory=lambda: list(IN_DRIVER_BY_DEFAULT), description="Roles built in the driver's process instead of as "
        "actors. Default both: each finished game crosses one process boundary (rollout -> driver) instead of three "
        "(rollout -> driver -> league, buffer), and a drawn batch one (driver -> learner). `[]`: every role an actor.")
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK", description="How the placement group's bundles are spread over nodes.")
    placement_timeout_s: float = Field(
        60.0, gt=0, le=86400, description="How long to wait for the cluster to hold every role before failing.")
    shared_filesystem: bool = Field(
        True, description="Rollout replicas read checkpoints from the run directory (every node sees it). False: "
        "checkpoints travel as bytes through Ray's object store.")
    max_restarts: int = Field(
        3, ge=0, le=1000, description="Restarts of dead rollout actors over the run; one more death fails the run.")
