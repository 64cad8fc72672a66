"""Per-game statistics: running per-(mode, env) totals for summaries and the win/draw/loss
aggregation of evaluation rounds and tournaments. Nothing is kept per game."""

from __future__ import annotations

from typing import Any

from ...records import EvalRecord
from ...types import GameResult, GameSpec


def anchor_seat(game: GameSpec) -> int:
    """The seat a game is reported for: the learner's first seat in a training game, the
    evaluated model's in an evaluation game, seat 0 in a tournament."""
    if game.train_seats:
        return game.train_seats[0]
    for i, r in enumerate(game.seats):
        if r.kind != "fixed":
            return i
    return 0


class CollectionStats:
    """Running totals per (mode, env) of every game played, from the anchor seat's side: what the
    ``summary`` records carry as ``envs`` and the console tracker shows. Nothing is kept per game;
    a windowed rate is the difference of two summaries."""

    FIELDS = ("games", "failed", "win", "draw", "loss", "invalid", "turns", "anchor_turns", "format_ok")
    _OUTCOME_COLUMN = {"win": 2, "draw": 3, "loss": 4}

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[int]] = {}
        self.generated_tokens = 0  # completion tokens of every seat, every game

    def add(self, result: GameResult) -> None:
        game = result.game
        key = (game.mode, game.env.env_id)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0] * len(self.FIELDS)
        row[0] += 1
        for traj in result.trajectories:
            for turn in traj.turns:
                self.generated_tokens += len(turn.completion_token_ids)
        if result.outcome == "failed":
            row[1] += 1
            return
        pid = anchor_seat(game)
        row[self._OUTCOME_COLUMN[result.outcome_for(pid)]] += 1
        if pid < len(result.trajectories):
            traj = result.trajectories[pid]
            row[5] += traj.made_invalid_move
            row[7] += len(traj.turns)
            row[8] += sum(t.format_ok for t in traj.turns)
        row[6] += result.num_turns

    def state_dict(self) -> dict[str, Any]:
        return {"rows": [[mode, env, row] for (mode, env), row in self.rows.items()], "generated_tokens": self.generated_tokens}

    def load_state_dict(self, state: dict[str, Any] | list[Any]) -> None:
        if isinstance(state, list):  # snapshots before generated_tokens: the rows alone, fewer columns
            state = {"rows": state, "generated_tokens": 0}
        width = len(self.FIELDS)
        self.rows = {(mode, env): row + [0] * (width - len(row)) for mode, env, row in state["rows"]}
        self.generated_tokens = state["generated_tokens"]

    def snapshot(self) -> dict[str, dict[str, dict[str, float]]]:  # {mode: {env_id: EnvTotals fields}}
        """{mode: {env_id: {games, failed, win_rate, draw_rate, loss_rate, invalid_rate, format_rate,
        mean_turns}}}; rates are over the games that finished (format: over the anchor's turns)."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (mode, env_id), row in sorted(self.rows.items()):
            c = dict(zip(self.FIELDS, row))
            n = c["games"] - c["failed"]
            out.setdefault(mode, {})[env_id] = {
                "games": c["games"],
                "failed": c["failed"],
                "win_rate": c["win"] / n if n else 0.0,
                "draw_rate": c["draw"] / n if n else 0.0,
                "loss_rate": c["loss"] / n if n else 0.0,
                "invalid_rate": c["invalid"] / n if n else 0.0,
                "format_rate": c["format_ok"] / c["anchor_turns"] if c["anchor_turns"] else 0.0,
                "mean_turns": c["turns"] / n if n else 0.0,
            }
        return out


class OutcomeAggregator:
    """Win/draw/loss, invalid-move and format rates per (env, model, opponent), updated game by
    game so that nothing is kept per game.

    With an ``anchor`` uid (evaluation) only the anchor's seat is counted against the other seat;
    without one (tournament) every seat is counted against every other distinct agent."""

    FIELDS = ("games", "win", "draw", "loss", "invalid", "turns", "format_ok", "failed", "return_sum")
    _OUTCOME_COLUMN = {"win": 1, "draw": 2, "loss": 3}

    def __init__(self, anchor: str | None) -> None:
        self.anchor = anchor
        self.stats: dict[tuple[str, str, str], list[float]] = {}  # counts, and the sum of the seat's final rewards

    def _row(self, key: tuple[str, str, str]) -> list[float]:
        row = self.stats.get(key)
        if row is None:
            row = self.stats[key] = [0] * len(self.FIELDS)
        return row

    def add(self, result: GameResult) -> None:
        seats = result.game.seats
        env_id = result.game.env.env_id
        failed = result.outcome == "failed"
        outcomes = {} if failed else result.outcomes
        for i, s in enumerate(seats):
            uid = s.uid
            if self.anchor is not None and uid != self.anchor:
                continue
            others = {o.uid for o in seats if o.uid != uid} or {uid}
            if failed:
                for opp in others:
                    self._row((env_id, uid, opp))[7] += 1
            else:
                traj = result.trajectories[i]
                turns = traj.turns
                column = self._OUTCOME_COLUMN[outcomes.get(i, "draw")]
                invalid = traj.made_invalid_move
                fmt = 0
                for t in turns:
                    fmt += t.format_ok
                reward = float(result.rewards.get(i, 0.0))
                for opp in others:
                    row = self._row((env_id, uid, opp))
                    row[0] += 1
                    row[column] += 1
                    row[4] += invalid
                    row[5] += len(turns)
                    row[6] += fmt
                    row[8] += reward
            if self.anchor is not None:
                break  # the evaluated model's first seat only

    def add_all(self, results: list[GameResult]) -> None:
        for result in results:
            self.add(result)

    def state_dict(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "stats": [[list(key), row] for key, row in self.stats.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.anchor = state["anchor"]
        width = len(self.FIELDS)  # snapshots before return_sum: fewer columns
        self.stats = {tuple(key): list(row) + [0] * (width - len(row)) for key, row in state["stats"]}

    def records(self, step: int, time: float = 0.0) -> list[EvalRecord]:
        out = []
        for (env_id, uid, opp), row in sorted(self.stats.items()):
            c = dict(zip(self.FIELDS, row))
            n = c["games"]
            out.append(EvalRecord(
                step=step, time=time, env_id=env_id, model=uid, opponent=opp, games=int(n), failed=int(c["failed"]),
                mean_return=c["return_sum"] / n if n else 0.0,
                win_rate=c["win"] / n if n else 0.0,
                draw_rate=c["draw"] / n if n else 0.0,
                loss_rate=c["loss"] / n if n else 0.0,
                invalid_rate=c["invalid"] / n if n else 0.0,
                format_rate=c["format_ok"] / c["turns"] if c["turns"] else 0.0,
            ))
        return out
