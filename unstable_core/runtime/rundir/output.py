"""What a run writes, in the driver: the run directory, transcripts, and the trackers.

The run directory is made (or refused: it already holds a run) before any role is built; every
OS error on it is one line naming the path. Trackers are built here, from the plan, and each
``log`` goes through ``RunOutput.log``, so a tracker that raises is named in the error.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import ComponentError, UnstableError, describe_error
from ...records import GameRecord, Record, TranscriptRecord
from ...state import load_into, state_of
from ...types import GameResult
from ..building import Builder
from ..driver.stats import anchor_seat
from ..plan import RunPlan
from ..seeds import derive_seed, unit_hash
from .jsonio import json_line, write_json_atomic

if TYPE_CHECKING:  # pragma: no cover
    from ...plugins import PluginSystem

TRANSCRIPT_TEXT_LIMIT = 2000
RUN_MARKERS = ("config.json", "metrics.jsonl", "registry.json")


def _clip(text: str, limit: int = TRANSCRIPT_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def failed_start(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds only a run that failed before it played a game or saved
    anything: no snapshot, no checkpoint, no game, and a metrics log of its start and its failed
    end (what a model that cannot be loaded leaves, say)."""
    if any((run_dir / name).exists() for name in ("state", "checkpoints", "registry.json")):
        return False
    if any(p.stat().st_size for p in (run_dir / "games").glob("*") if p.is_file() and not p.is_symlink()):
        return False
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    except (OSError, ValueError):
        return False
    return len(records) == 2 and records[0].get("type") == "start" and records[1].get("type") == "end" \
        and records[1].get("status") == "failed" and not records[1].get("games")


def prepare_run_dir(path: str | os.PathLike[str], resume: bool = False) -> Path:
    """Make the run directory and its ``games/`` folder; refuse one that already holds a run
    (unless resuming it). The files of a failed start (``failed_start``) are replaced: such a
    directory does not block the rerun that fixes the config."""
    if not str(path).strip():
        raise UnstableError("run directory '': give a path (--run-dir)")
    run_dir = Path(path)
    try:
        if not resume and run_dir.is_dir() and any((run_dir / m).exists() for m in RUN_MARKERS):
            if not failed_start(run_dir):
                raise UnstableError(f"run directory {run_dir} already holds a run; choose another --run-dir "
                                    f"(or go on with it: unstable run --resume {run_dir})")
            for name in ("config.json", "metrics.jsonl", "plugins.json"):
                (run_dir / name).unlink(missing_ok=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in ("state", "checkpoints"):  # written at the first snapshot: refused now, not then
            if (run_dir / name).exists() and not (run_dir / name).is_dir():
                raise UnstableError(f"run directory {run_dir}: {run_dir / name} is a file where the run keeps its "
                                    f"{'snapshots' if name == 'state' else name}: move it away or choose another --run-dir")
        if (run_dir / "games").is_symlink():  # its transcripts would be written wherever it points
            raise UnstableError(f"run directory {run_dir}: games is a symbolic link; the run's files are written in its directory only")
        (run_dir / "games").mkdir(exist_ok=True)
        probe = run_dir / ".unstable-write-test"
        probe.write_text("")
        probe.unlink()
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else describe_error(exc)
        raise UnstableError(f"run directory {str(run_dir)[:200]!r}: {reason}") from None
    return run_dir


class RunOutput:
    def __init__(self, plan: RunPlan, system: PluginSystem) -> None:
        self.plan = plan
        self.run_dir = Path(plan.run_dir)
        self.start = time.monotonic()
        builder = Builder(plan, system)
        keys = [f"trackers.{i}" for i in range(len(plan.config.trackers))]
        self.trackers = [(builder.label(k), builder.build(k)) for k in keys]
        wants = [(builder.spec(k), builder.options(k)) for k in keys]
        self.game_trackers = [t for t, (spec, opts) in zip(self.trackers, wants) if spec.wants("game_records", opts)]
        self.transcript_trackers = [t for t, (spec, opts) in zip(self.trackers, wants) if spec.wants("transcripts", opts)]
        self.transcript_key = derive_seed(plan.config.seed, "transcripts")
        self._transcripts: dict[str, Any] = {}
        self.repair = False  # on resume: go on with a damaged metrics log (--repair), saying so
        self.repaired: list[str] = []

    def now(self) -> float:
        return round(time.monotonic() - self.start, 3)

    def write_json(self, name: str, data: Any) -> None:
        """Write one of the run's JSON files atomically, without an fsync: ``registry.json`` and
        ``plugins.json`` are views of state a snapshot saves, and ``config.json``, which a resume
        reads, is made durable by the first snapshot (``snapshots.write_snapshot``)."""
        try:
            write_json_atomic(self.run_dir / name, data, durable=False)
        except OSError as exc:
            raise UnstableError(f"run directory {self.run_dir}: cannot write {name}: {exc.strerror or exc}") from None

    # -- trackers ---------------------------------------------------------------------------------
    def log(self, record: Record) -> None:
        for label, tracker in self.trackers:
            self._log(label, tracker, record)

    @staticmethod
    def _log(label: str, tracker: Any, record: Record) -> None:
        try:
            tracker.log(record)
        except UnstableError:
            raise
        except Exception as exc:
            raise ComponentError(f"{label}: log raised {describe_error(exc)}") from exc

    # -- games ------------------------------------------------------------------------------------
    def games(self, results: list[GameResult], step: int) -> None:
        """Transcripts (a seeded sample) and per-game records for trackers that want them."""
        for result in results:
            if self.game_trackers:
                record = game_record(result, step, self.now())
                for label, tracker in self.game_trackers:
                    self._log(label, tracker, record)
            self._transcript(result, step)

    def _transcript(self, result: GameResult, step: int) -> None:
        c = self.plan.config.collection
        game = result.game
        frac = c.eval_transcripts if game.mode == "eval" else c.transcripts
        # a fixed, seed-determined subset of game indices
        if frac <= 0 or (frac < 1 and unit_hash(self.transcript_key, game.game_idx) >= frac):
            return
        fh = self._transcripts.get(game.mode)
        if fh is None:
            path = self.run_dir / "games" / f"{game.mode}.jsonl"
            try:  # never through a symbolic link, as the jsonl tracker
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
                fh = self._transcripts[game.mode] = open(fd, "a", encoding="utf-8", buffering=1 << 20)
            except OSError as exc:
                reason = "it is a symbolic link" if path.is_symlink() else exc.strerror or exc
                raise UnstableError(f"run directory {self.run_dir}: cannot write games/{game.mode}.jsonl: {reason}") from None
        line = transcript(result, step)
        fh.write(json_line(line))  # flushed with each summary and at the end
        if self.transcript_trackers:
            record = TranscriptRecord.model_validate({**line, "time": self.now()})
            for label, tracker in self.transcript_trackers:
                self._log(label, tracker, record)

    def flush(self) -> None:
        for fh in self._transcripts.values():
            fh.flush()

    # -- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Transcript file sizes and the trackers' states: on resume, what came later goes."""
        self.flush()
        games = self.run_dir / "games"
        sizes = {p.name: p.stat().st_size for p in games.glob("*.jsonl")}
        return {"transcripts": sizes, "trackers": [state_of(t) for _, t in self.trackers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        games = self.run_dir / "games"
        for p in games.glob("*.jsonl"):
            if p.is_symlink():  # cutting it would cut the file it points to
                raise UnstableError(f"run directory {self.run_dir}: games/{p.name} is a symbolic link; put the file back")
            size = state["transcripts"].get(p.name, 0)
            if p.stat().st_size > size:
                os.truncate(p, size)
        from ...builtin.trackers import JsonlTracker

        for (label, tracker), saved in zip(self.trackers, state["trackers"]):
            try:
                if isinstance(tracker, JsonlTracker):
                    tracker.load_state_dict(saved, repair=self.repair)
                    if tracker.repaired:
                        self.repaired.append(tracker.repaired)
                else:
                    load_into(tracker, saved)
            except Exception as exc:
                raise ComponentError(f"{label}: load_state_dict raised {describe_error(exc)}") from exc

    def close(self) -> list[str]:
        """Close transcripts and trackers; return the errors of trackers that failed to close."""
        errors = []
        for fh in self._transcripts.values():
            fh.close()
        self._transcripts.clear()
        for label, tracker in self.trackers:
            try:
                tracker.close()
            except Exception as exc:
                errors.append(f"{label}: close raised {describe_error(exc)}")
        return errors


def transcript(result: GameResult, step: int) -> dict[str, Any]:
    """A game's transcript as written to ``games/MODE.jsonl``: the fields of ``TranscriptRecord``
    but ``type`` and ``time``, as plain values (built for one game in ten by default, so without
    the record's validation)."""
    game = result.game
    turns = sorted((t for tr in result.trajectories for t in tr.turns), key=lambda t: t.index)
    return {
        "step": step, "game_idx": game.game_idx, "mode": game.mode, "env_id": game.env.env_id, "seed": game.seed,
        "seats": [{"player_id": i, "uid": r.uid, "version": r.version} for i, r in enumerate(game.seats)],
        "train_seats": game.train_seats, "rewards": result.rewards, "outcome": result.outcome, "error": result.error,
        "turns": [{"player_id": t.player_id, "observation": _clip(t.observation), "completion": _clip(t.completion),
                   "action": _clip(t.action, 200), "format_ok": t.format_ok, "invalid": t.invalid,
                   "policy_version": t.policy_version} for t in turns],
    }


def game_record(result: GameResult, step: int, time_s: float) -> GameRecord:
    g = result.game
    anchor = anchor_seat(g)
    traj = result.trajectories[anchor] if anchor < len(result.trajectories) else None
    return GameRecord(
        step=step, time=time_s, game_idx=g.game_idx, mode=g.mode, env_id=g.env.env_id, outcome=result.outcome,
        error=result.error, seats=[r.uid for r in g.seats], rewards={str(k): v for k, v in result.rewards.items()},
        num_turns=result.num_turns, anchor=g.seats[anchor].uid if g.seats else None,
        anchor_outcome=result.outcome_for(anchor) if result.outcome != "failed" else None,
        invalid=bool(traj and traj.made_invalid_move), duration_s=round(result.duration_s, 6),
    )

