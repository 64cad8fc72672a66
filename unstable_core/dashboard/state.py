"""What the dashboard knows about a run: the metrics records folded, one at a time.

The same state is fed by the ``console`` tracker (records as they are logged) and by
``unstable watch`` (the lines of ``metrics.jsonl``), so both show the same numbers. Records are
taken as dicts (``record.model_dump()`` or a parsed JSON line); unknown types are ignored.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..progress import Task

RATE_WINDOW_S = 30.0  # throughput is measured over the last this many seconds of summaries
LEARNER_WINDOW = 5  # learner tokens/s: over the last this many updates


class DashboardState:
    def __init__(self) -> None:
        self.name = ""
        self.mode = "train"
        self.total = 0
        self.status = "starting"  # starting | running | completed | interrupted | failed
        self.error: str | None = None
        self.setup: Task | None = None  # set-up work going on (unstable_core.progress)
        self.time = 0.0  # seconds since the run started, of the latest record
        self.clock: tuple[float, float] | None = None  # (monotonic, run time) when a live view last synced
        self.step = 0
        self.games = 0
        self.failed = 0
        self.failures: dict[str, int] = {}
        self.buffer = (0, 0)
        self.envs: dict[str, dict[str, dict[str, float]]] = {}
        self.summaries: deque[tuple[float, int, int]] = deque()  # (time, games, generated tokens)
        self.overall_games_per_s: float | None = None
        self.train: dict[str, Any] = {}  # the latest train record
        self.logprob_gap: tuple[int, float, float] | None = None  # (step, mean, max) of the latest update that measured it
        self.logprob_gap_tolerance: float | None = None  # training.logprob_gap_tolerance of the run's config
        self.updates: deque[tuple[float, float]] = deque(maxlen=LEARNER_WINDOW)  # (train tokens, seconds)
        self.progress_origin: tuple[float, int] | None = None  # (time, done) when progress began
        self.evals: dict[tuple[str, str, str], dict[str, Any]] = {}  # (env, model, opponent) -> latest
        self.ratings: dict[str, dict[str, float]] = {}
        self.model_games: dict[str, int] = {}  # uid -> games played (ratings records that carry it)
        self.pairs: dict[tuple[str, str], dict[str, Any]] = {}  # each pair's latest counts
        self.restarts: list[dict[str, Any]] = []  # the restart records, oldest first

    # -- folding records --------------------------------------------------------------------------
    def add(self, record: Mapping[str, Any]) -> None:
        kind = record.get("type")
        self.time = max(self.time, float(record.get("time", 0.0)))
        self.step = int(record.get("step", self.step))
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(record)

    def _on_start(self, r: Mapping[str, Any]) -> None:
        self.name, self.mode, self.total = r["name"], r["mode"], int(r["total"])
        tolerance = ((r.get("config") or {}).get("training") or {}).get("logprob_gap_tolerance")
        self.logprob_gap_tolerance = float(tolerance) if isinstance(tolerance, (int, float)) else None
        self.status = "running"
        self.progress_origin = None  # a resumed leg measures its own pace

    def _on_end(self, r: Mapping[str, Any]) -> None:
        self.status, self.error = r["status"], r.get("error")

    def _on_train(self, r: Mapping[str, Any]) -> None:
        self.train = dict(r)
        if isinstance(r.get("logprob_gap_mean"), (int, float)):  # only updates with steps their own weights played
            self.logprob_gap = (int(r["step"]), float(r["logprob_gap_mean"]), float(r.get("logprob_gap_max", r["logprob_gap_mean"])))
        tokens, seconds = r.get("train_tokens"), r.get("update_s")
        if tokens is not None and seconds:
            self.updates.append((float(tokens), float(seconds)))
        self._progress(r["time"])

    def _on_summary(self, r: Mapping[str, Any]) -> None:
        self.games, self.failed = int(r["games"]), int(r["failed"])
        self.failures = dict(r.get("failures") or {})
        self.buffer = (int(r.get("buffer_size", 0)), int(r.get("buffer_capacity", 0)))
        self.envs = {mode: {env: dict(t) for env, t in per.items()} for mode, per in (r.get("envs") or {}).items()}
        self.overall_games_per_s = r.get("games_per_s")
        self.summaries.append((float(r["time"]), self.games, int(r.get("generated_tokens", 0))))
        while len(self.summaries) > 2 and self.summaries[-1][0] - self.summaries[1][0] >= RATE_WINDOW_S:
            self.summaries.popleft()
        if self.mode == "tournament":
            self._progress(r["time"])

    def _on_restart(self, r: Mapping[str, Any]) -> None:
        self.restarts.append(dict(r))

    def _on_eval(self, r: Mapping[str, Any]) -> None:
        self.evals[(r["env_id"], r["model"], r["opponent"])] = dict(r)

    def _on_ratings(self, r: Mapping[str, Any]) -> None:
        self.ratings = {uid: dict(v) for uid, v in r["ratings"].items()}
        self.model_games = {uid: int(n) for uid, n in (r.get("model_games") or {}).items()}
        self.pairs.update(((p["a"], p["b"]), dict(p)) for p in r.get("pairs") or [])  # the pairs that changed

    def _progress(self, time: float) -> None:
        if self.progress_origin is None:
            self.progress_origin = (float(time), self.done)

    # -- derived figures --------------------------------------------------------------------------
    @property
    def done(self) -> int:
        """Learner steps made, or tournament games played."""
        return self.step if self.mode == "train" else self.games

    @property
    def unit(self) -> str:
        return "step" if self.mode == "train" else "game"

    def elapsed_s(self) -> float:
        """Seconds since the run started: while it runs in a live view, the wall clock since the
        latest record is added, so the clock moves between records (set-up, a long evaluation)."""
        if self.clock is None or self.status not in ("starting", "running"):
            return self.time
        mono, run_time = self.clock
        return max(self.time, run_time + time.monotonic() - mono)

    def eta_s(self) -> float | None:
        """Seconds left at the pace since progress began; None before there is a pace."""
        if self.progress_origin is None or not self.total:
            return None
        t0, d0 = self.progress_origin
        if self.done <= d0 or self.time <= t0:
            return None
        return (self.time - t0) / (self.done - d0) * max(self.total - self.done, 0)

    def _rate(self, index: int) -> float | None:
        if len(self.summaries) < 2:
            return None
        first, last = self.summaries[0], self.summaries[-1]
        span = last[0] - first[0]
        return (last[index] - first[index]) / span if span > 0 else None

    def games_per_s(self) -> float | None:
        rate = self._rate(1)
        return self.overall_games_per_s if rate is None else rate

    def generation_tokens_per_s(self) -> float | None:
        rate = self._rate(2)
        return rate if rate else None  # scripted agents generate no tokens

    def learner_tokens_per_s(self) -> float | None:
        seconds = sum(s for _, s in self.updates)
        return sum(t for t, _ in self.updates) / seconds if seconds > 0 else None

    def leaderboard(self, limit: int | None) -> list[tuple[str, float, float | None]]:
        """The top ``limit`` models (None: all): (uid, value, sigma or None), best first. The value
        is the TrueSkill mu where the rater gives one, else its score, else its first number."""
        rows = []
        for uid, numbers in self.ratings.items():
            if not numbers:
                continue
            for key in ("mu", "score"):
                if key in numbers:
                    value = numbers[key]
                    break
            else:
                value = next(iter(numbers.values()))
            rows.append((uid, float(value), numbers.get("sigma")))
        rows.sort(key=lambda r: (-r[1], r[0]))
        return rows[:limit]

    def matches(self, uids: list[str]) -> dict[tuple[str, str], int]:
        """Games played per (a, b), both orders, among ``uids``."""
        wanted, out = set(uids), {}
        for p in self.pairs.values():
            a, b = p["a"], p["b"]
            if a in wanted and b in wanted:
                out[(a, b)] = out[(b, a)] = int(p["games"])
        return out

    def latest_evals(self) -> list[dict[str, Any]]:
        """The latest evaluation per (env, model, opponent), newest step first."""
        return sorted(self.evals.values(), key=lambda r: (-r["step"], r["env_id"], r["model"], r["opponent"]))
