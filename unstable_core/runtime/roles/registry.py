"""The model registry: who can sit at a table, how they did, and which checkpoint is current."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...types import Checkpoint, GameResult, ModelRef
from ..rundir.jsonio import write_json_atomic


@dataclass
class ModelEntry:
    ref: ModelRef
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    invalid_games: int = 0
    rating: dict[str, float] = field(default_factory=dict)
    active: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {
            "uid": self.ref.uid,
            "kind": self.ref.kind,
            "backend": self.ref.backend,
            "model": self.ref.model,
            "version": self.ref.version,
            "games": self.games,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
            "invalid_games": self.invalid_games,
            "active": self.active,
            "rating": dict(self.rating),
        }


@dataclass
class PairStats:
    """Head-to-head counts of two models ``a`` < ``b`` (uids are free text: kept apart from the
    counts' names)."""

    games: int = 0
    draws: int = 0
    wins_a: int = 0
    wins_b: int = 0
    reward_a: float = 0.0  # the sum of a's rewards over those games
    reward_b: float = 0.0


def checkpoint_ref(checkpoint: Checkpoint, base: ModelRef) -> ModelRef:
    """The ModelRef that serves a learner checkpoint: the base model with the adapter."""
    return base.model_copy(
        update={"uid": checkpoint.uid, "kind": "checkpoint", "adapter_path": checkpoint.path, "version": checkpoint.version}
    )


def sampler_mixture(sampler: Any, registry: Any) -> dict[str, float]:
    """A ``PopulationMixture`` sampler's mixture: ``sampler.mixture(registry)`` when its
    ``mixture`` takes a ``registry`` parameter (a mixture that depends on pair results), else
    ``sampler.mixture()``."""
    import inspect

    try:
        takes = "registry" in inspect.signature(sampler.mixture).parameters
    except (TypeError, ValueError):  # a callable without a signature Python can read
        takes = False
    return sampler.mixture(registry) if takes else sampler.mixture()


class ModelRegistry:
    """Base model, checkpoints, fixed opponents, the current checkpoint, match counts and
    win/draw/loss per model and per pair. Raters store their numbers in ``entry.rating``."""

    def __init__(self) -> None:
        self.entries: dict[str, ModelEntry] = {}
        self.current_uid: str | None = None
        #: (uid_a, uid_b) with uid_a < uid_b -> head-to-head counts
        self.pairs: dict[tuple[str, str], PairStats] = {}
        #: (uid_a, uid_b) with uid_a < uid_b -> a's exact expected reward against b (when computed)
        self.payoffs: dict[tuple[str, str], float] = {}
        #: the last least exploitable mixture computed: (its members' uids, their weights)
        self.least: tuple[list[str], list[float]] | None = None
        self._fixed: list[ModelRef] | None = None

    # -- membership ---------------------------------------------------------------------------
    def add(self, ref: ModelRef, *, current: bool = False) -> ModelEntry:
        if ref.uid in self.entries:
            raise ValueError(f"model uid {ref.uid!r} is already registered")
        entry = ModelEntry(ref=ref)
        self.entries[ref.uid] = entry
        self._fixed = None
        if current:
            self.current_uid = ref.uid
        return entry

    def add_checkpoint(self, checkpoint: Checkpoint, base: ModelRef) -> ModelRef:
        """Register a learner checkpoint; it becomes the current model."""
        ref = checkpoint_ref(checkpoint, base)
        self.add(ref, current=True)
        return ref

    def get(self, uid: str) -> ModelEntry:
        return self.entries[uid]

    @property
    def current(self) -> ModelRef | None:
        return self.entries[self.current_uid].ref if self.current_uid else None

    def fixed(self) -> list[ModelRef]:
        """Fixed opponents in registration order (cached: samplers ask for every game)."""
        if self._fixed is None:
            self._fixed = [e.ref for e in self.entries.values() if e.ref.kind == "fixed"]
        return list(self._fixed)

    def checkpoints(self, include_base: bool = True) -> list[ModelRef]:
        """Learner snapshots, oldest first (the base model first when included)."""
        kinds = {"checkpoint", "base"} if include_base else {"checkpoint"}
        refs = [e.ref for e in self.entries.values() if e.ref.kind in kinds]
        return sorted(refs, key=lambda r: (r.version, r.kind != "base"))

    def active_checkpoints(self, limit: int | None = None) -> list[ModelRef]:
        refs = [r for r in self.checkpoints() if self.entries[r.uid].active]
        return refs[-limit:] if limit else refs

    def set_active(self, uids: Iterable[str]) -> None:
        keep = set(uids)
        for e in self.entries.values():
            if e.ref.kind in ("checkpoint", "base"):
                e.active = e.ref.uid in keep

    # -- results --------------------------------------------------------------------------------
    @staticmethod
    def pair_key(a: str, b: str) -> tuple[str, str]:
        return (a, b) if a < b else (b, a)

    def record_game(self, result: GameResult) -> None:
        """Count a finished game for every seat and every pair of distinct seats."""
        if result.outcome == "failed":
            return
        seats = result.game.seats
        outcomes = result.outcomes
        trajectories = result.trajectories
        for pid, ref in enumerate(seats):
            entry = self.entries.get(ref.uid)
            if entry is None:
                continue
            entry.games += 1
            o = outcomes.get(pid, "draw")
            if o == "win":
                entry.wins += 1
            elif o == "loss":
                entry.losses += 1
            else:
                entry.draws += 1
            if pid < len(trajectories) and trajectories[pid].made_invalid_move:
                entry.invalid_games += 1
        rewards = result.rewards
        for i in range(len(seats)):
            for j in range(i + 1, len(seats)):
                a, b = seats[i].uid, seats[j].uid
                if a == b:
                    continue
                ri, rj = rewards.get(i, 0.0), rewards.get(j, 0.0)
                if b < a:
                    a, b, ri, rj = b, a, rj, ri
                pair = self.pairs.get((a, b))
                if pair is None:
                    pair = self.pairs[(a, b)] = PairStats()
                pair.games += 1
                pair.reward_a += ri
                pair.reward_b += rj
                if ri > rj:
                    pair.wins_a += 1
                elif rj > ri:
                    pair.wins_b += 1
                else:
                    pair.draws += 1

    def match_count(self, a: str, b: str) -> int:
        pair = self.pairs.get(self.pair_key(a, b))
        return pair.games if pair is not None else 0

    def head_to_head(self, a: str, b: str) -> tuple[int, int, int]:
        """(wins of a, draws, wins of b) over the games a and b played against each other."""
        pair = self.pairs.get(self.pair_key(a, b))
        if pair is None:
            return (0, 0, 0)
        return (pair.wins_a, pair.draws, pair.wins_b) if a < b else (pair.wins_b, pair.draws, pair.wins_a)

    def lineage(self, uid: str, window: int = 0) -> list[str]:
        """``uid`` and, for a learner checkpoint, the ``window`` checkpoints before it (the base
        model counting as the first), newest first: the same policy a few updates earlier, each a
        uid of its own. A fixed opponent's lineage is itself."""
        ref = self.entries[uid].ref
        if ref.kind == "fixed" or window <= 0:
            return [uid]
        chain = [r.uid for r in self.checkpoints()]
        k = chain.index(uid)
        return chain[max(0, k - window):k + 1][::-1]

    def win_rate(self, a: str, b: str, *, prior: float = 0.0, lineage: int = 0) -> float | None:
        """a's win rate against b, a draw counting half, over the games a played against b, and
        with ``lineage = k`` those of the k checkpoints before a too (``lineage(a, k)``; each
        checkpoint is a new uid whose own results start from zero), plus ``prior`` pseudo-games
        of even result: ``(wins + draws / 2 + prior / 2) / (games + prior)``. None when that counts
        nothing (no games, no prior)."""
        wins = draws = games = 0
        for uid in self.lineage(a, lineage):
            if uid == b:
                continue
            w, d, lost = self.head_to_head(uid, b)
            wins, draws, games = wins + w, draws + d, games + w + d + lost
        if games + prior <= 0:
            return None
        return (wins + draws / 2 + prior / 2) / (games + prior)

    def mean_reward(self, a: str, b: str) -> float | None:
        """a's mean reward over the games a and b played against each other (None if none): in a
        zero-sum game with scores (chips), the payoff of the pair's meta-game."""
        pair = self.pairs.get(self.pair_key(a, b))
        if pair is None or not pair.games:
            return None
        return (pair.reward_a if a < b else pair.reward_b) / pair.games

    def record_payoff(self, a: str, b: str, value: float) -> None:
        """a's exact expected reward against b (b's is its negative in a zero-sum game)."""
        self.payoffs[self.pair_key(a, b)] = value if a < b else -value

    def exact_payoff(self, a: str, b: str) -> float | None:
        """a's exact expected reward against b, when the run computed it (None otherwise)."""
        value = self.payoffs.get(self.pair_key(a, b))
        return None if value is None else value if a < b else -value

    def record_least_exploitable(self, uids: list[str], weights: list[float]) -> None:
        """The weights of the least exploitable mixture of ``uids`` (kept until the next one)."""
        self.least = (list(uids), [float(w) for w in weights])

    def least_exploitable(self, uids: list[str]) -> list[float] | None:
        """The weights of the least exploitable mixture of ``uids``, when the last one computed
        was of exactly these models (None otherwise)."""
        return list(self.least[1]) if self.least is not None and self.least[0] == list(uids) else None

    # -- snapshot -------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {
            "current": self.current_uid,
            "models": [e.as_dict() for e in self.entries.values()],
            "pairs": [
                {"a": a, "b": b, "games": p.games, "draws": p.draws, "wins_a": p.wins_a, "wins_b": p.wins_b}
                for (a, b), p in sorted(self.pairs.items())
            ],
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "current": self.current_uid,
            "entries": [{**{k: v for k, v in e.__dict__.items() if k != "ref"}, "ref": e.ref.model_dump(mode="json")}
                        for e in self.entries.values()],
            "pairs": [[a, b, p.games, p.draws, p.wins_a, p.wins_b, p.reward_a, p.reward_b] for (a, b), p in self.pairs.items()],
            "payoffs": [[a, b, v] for (a, b), v in self.payoffs.items()],
            "least": None if self.least is None else {"members": self.least[0], "weights": self.least[1]},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.entries = {}
        for e in state["entries"]:
            entry = ModelEntry(**{**e, "ref": ModelRef.model_validate(e["ref"])})
            self.entries[entry.ref.uid] = entry
        self.current_uid = state["current"]
        # a snapshot written before the reward sums holds six values a pair
        self.pairs = {(a, b): PairStats(*counts) for a, b, *counts in state["pairs"]}
        self.payoffs = {(a, b): float(v) for a, b, v in state.get("payoffs", [])}
        least = state.get("least")
        self.least = None if least is None else (list(least["members"]), [float(w) for w in least["weights"]])
        self._fixed = None

    def write(self, path: str | os.PathLike[str]) -> None:
        write_json_atomic(path, self.snapshot())
