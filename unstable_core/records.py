"""Metrics records: the contract between the driver and every tracker.

A tracker's ``log(record)`` receives one of these pydantic models; ``record.type`` says which.
The ``jsonl`` tracker writes ``record.model_dump(mode="json")``, one line each, so the names
below are also the keys of ``metrics.jsonl``. ``step`` is always the learner step (updates made
so far); ``time`` is seconds since the run started.

=============== ===================================================================================
``train``       one per learner update: the learner's metrics plus the driver's
``eval``        one per (evaluation round, env, model, opponent); in a tournament one per (env,
                agent, opponent)
``eval_skipped`` an evaluation round a plugin vetoed (``unstable_validation_start``)
``summary``     every second and at the end: games, throughput, failures, buffer, per-env totals
``ratings``     with every summary: the rater's numbers per model
``game``        one per game, only for trackers whose ``TrackerSpec.game_records`` says so
``transcript``  one per game whose transcript goes to ``games/`` (a seeded sample), only for
                trackers whose ``TrackerSpec.transcripts`` says so
``resume``      where a resumed run went on: the snapshot's learner step
``restart``     a role's worker died and the executor started a new one (``report_restart``)
``start``       first of a run (and of each resumed leg): what it plans, its config and plugins
``end``         last of a run: how it ended (completed, interrupted, failed)
=============== ===================================================================================
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    """Base of every metrics record."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    type: str
    step: int = Field(0, description="Learner updates made when the record was written.")
    time: float = Field(0.0, description="Seconds since the run started.")


class TrainRecord(Record):
    """One learner update. Besides the fields below it carries every metric the learner
    returned (``loss``, ``grad_norm``, ... : floats), as extra keys."""

    model_config = ConfigDict(extra="allow")

    type: Literal["train"] = "train"
    staleness_mean: float = Field(description="Mean of (step - 1 - policy version) over the batch's turns.")
    staleness_max: float = Field(description="Largest staleness in the batch.")
    batch_steps: float = Field(description="Steps the learner received.")
    dropped: float = Field(0.0, description="Steps dropped by the zero-advantage filter before this update.")
    update_s: float = Field(0.0, description="Seconds the learner's update took (with train_tokens: learner tokens/s).")


class EvalRecord(Record):
    type: Literal["eval"] = "eval"
    env_id: str
    model: str = Field(description="The evaluated model (in a tournament: the agent counted).")
    opponent: str
    games: int
    failed: int = 0
    win_rate: float
    draw_rate: float
    loss_rate: float
    invalid_rate: float = Field(description="Games in which the model made an invalid move.")
    format_rate: float = Field(description="Turns with a well-formed answer.")
    mean_return: float | None = Field(
        None, description="The model's mean final reward from the env over the games that finished, before any reward "
        "transform (chips for OpenSpiel's poker; +1 / 0 / -1 for TextArena's games). None in records written before it.",
    )
    policy: dict[str, float] = Field(
        default_factory=dict, description="Exact policy metrics of the evaluated model on this env, when "
        "`collection.eval_policy_metrics` is on and the env's provider offers them (openspiel: exploitability, "
        "nash_conv, invalid_mass, info_states).",
    )
    mixtures: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="The same figures for the population's mixtures when the round started "
        "(`collection.eval_mixtures`): 'uniform' (every checkpoint alike, fictitious play's output) and 'meta' (the model "
        "sampler's mixture, psro's), each with `members`.",
    )


class EvalSkippedRecord(Record):
    type: Literal["eval_skipped"] = "eval_skipped"
    model: str


class EnvTotals(BaseModel):
    """Running totals of one (mode, env) since the start, from the anchor seat's side."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    games: int
    failed: int
    win_rate: float
    draw_rate: float
    loss_rate: float
    invalid_rate: float
    format_rate: float = Field(0.0, description="The anchor seat's turns with a well-formed answer.")
    mean_turns: float


class SummaryRecord(Record):
    type: Literal["summary"] = "summary"
    games: int = Field(description="Games played so far (every mode).")
    games_per_s: float
    failed: int
    failures: dict[str, int] = Field(default_factory=dict, description="Failed games per reason (exception type).")
    buffer_size: int = 0
    buffer_capacity: int = 0
    dropped_zero_advantage: int = 0
    generated_tokens: int = Field(0, description="Completion tokens generated so far (every mode; 0 for scripted agents).")
    restarts: int = Field(0, description="Roles the executor restarted since the run (or its resumed leg) started.")
    envs: dict[str, dict[str, EnvTotals]] = Field(default_factory=dict, description="{mode: {env_id: totals}}.")


class PairCount(BaseModel):
    """Games played between two models (``a`` < ``b``), from ``a``'s side."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    a: str
    b: str
    games: int
    draws: int = 0
    wins_a: int = 0
    wins_b: int = 0


class RatingsRecord(Record):
    type: Literal["ratings"] = "ratings"
    games: int
    ratings: dict[str, dict[str, float]] = Field(description="uid -> the rater's numbers (mu, sigma, score, ...).")
    pairs: list[PairCount] = Field(default_factory=list, description=(
        "Games per pair of models (the match heatmap): the pairs whose counts changed since the previous ratings "
        "record, with their counts so far; a reader keeps each pair's latest (registry.json holds them all)."))
    model_games: dict[str, int] = Field(default_factory=dict, description=(
        "uid -> games the model has played (the registry's count; failed games are not counted)."))


class GameRecord(Record):
    type: Literal["game"] = "game"
    game_idx: int
    mode: str
    env_id: str
    outcome: str
    error: str | None = None
    seats: list[str]
    rewards: dict[str, float]
    num_turns: int
    anchor: str | None = None
    anchor_outcome: str | None = None
    invalid: bool = False
    duration_s: float = 0.0


class TranscriptTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    player_id: int
    observation: str = Field(description="What the player saw (cut at 2,000 characters).")
    completion: str
    action: str
    format_ok: bool
    invalid: bool
    policy_version: int | None = None


class TranscriptRecord(Record):
    """A game's transcript, as written to ``games/MODE.jsonl``."""

    type: Literal["transcript"] = "transcript"
    game_idx: int
    mode: str
    env_id: str
    seed: int
    seats: list[dict[str, Any]] = Field(description="Per seat: player_id, uid, version.")
    train_seats: list[int] = Field(default_factory=list)
    rewards: dict[int, float]
    outcome: str
    error: str | None = None
    turns: list[TranscriptTurn]


class ResumeRecord(Record):
    """A resumed run goes on from the snapshot of learner step ``step``."""

    type: Literal["resume"] = "resume"
    games: int = Field(description="Games played up to the snapshot.")
    replayed: int = Field(0, description="Training games that were in flight at the snapshot, played again.")
    repaired: list[str] = Field(default_factory=list, description="What `--repair` let the run go on with (a cut or "
                                "edited metrics log), one line each; empty when nothing was damaged.")


class RestartRecord(Record):
    """The worker of role ``role`` died and the executor started a new one (the lost games are
    played again): why, and how many of the run's restarts are used."""

    type: Literal["restart"] = "restart"
    role: str = Field(description="The role whose worker died, e.g. rollout-0.")
    cause: str = Field(description="Why it died, in one line (a signal, an exit, the executor's reason).")
    pid: int | None = Field(None, description="The process id of the worker that died, when known.")
    restarts: int = Field(description="Restarts so far in this run, this one included.")
    max_restarts: int = Field(description="Restarts the executor allows over the run.")


class StartRecord(Record):
    """What a run plans: ``total`` learner steps (``mode = "train"``) or tournament games."""

    type: Literal["start"] = "start"
    name: str
    mode: Literal["train", "tournament"]
    total: int = Field(description="Learner steps to make, or tournament games to play.")
    run_dir: str
    resumed: bool = False
    started_over: bool = Field(False, description="`--resume` on a run stopped before its first snapshot: started "
                               "over from its config.json (nothing it learned could be kept).")
    config: dict[str, Any] = Field(default_factory=dict, description="The resolved run config.")
    plugins: list[dict[str, Any]] = Field(default_factory=list, description="Plugin records: name, version, components.")


class EndRecord(Record):
    type: Literal["end"] = "end"
    status: Literal["completed", "interrupted", "failed"]
    games: int = 0
    error: str | None = None


__all__ = [
    "Record", "ResumeRecord", "RestartRecord", "TrainRecord", "EvalRecord", "EvalSkippedRecord", "EnvTotals", "SummaryRecord", "RatingsRecord", "GameRecord",
    "PairCount", "StartRecord", "EndRecord", "TranscriptRecord", "TranscriptTurn",
]
