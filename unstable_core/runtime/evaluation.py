"""Evaluation rounds: the current model against every fixed opponent on every evaluation env.

A round is capped at ``eval_games`` per (checkpoint, env, opponent) by the league; plugins may
veto it (``unstable_validation_start``). Its games go through the driver's lanes (in sync mode,
rounds in game order) and are aggregated into one ``EvalRecord`` per (env, opponent). A round
still playing when a run snapshot is taken (async mode) is saved with it and finished on resume.
"""

from __future__ import annotations

from typing import Any

from ..errors import ComponentError
from ..records import EvalRecord, EvalSkippedRecord
from ..types import GameResult, GameSpec, ValidationEndContext, ValidationStartContext
from .stats import OutcomeAggregator


async def evaluate(driver: Any, step: int) -> list[EvalRecord]:
    round = await start_round(driver, step)
    return [] if round is None else await play_round(driver, round)


async def start_round(driver: Any, step: int) -> EvalRound | None:
    """Decide the round (plugins may veto it) and schedule its games; the driver lists it from
    now on, so that a snapshot taken before its games are played holds it."""
    c, league = driver.cfg.collection, driver.roles.league
    fixed = await league.fixed()
    if not fixed or not driver.cfg.evaluation_envs or c.eval_games == 0:
        return None
    current = await league.current()
    ctx = ValidationStartContext(run_dir=driver.run_dir, learner_step=step, model=current,
                                 env_ids=[e.env_id for e in driver.cfg.evaluation_envs], opponents=[o.uid for o in fixed])
    votes = driver.system.call_lifecycle("unstable_validation_start", ctx=ctx)
    for plugin, vote in votes:
        if not isinstance(vote, bool):
            raise ComponentError(f"{driver.system.describe(plugin)}: hook unstable_validation_start returned {vote!r}; "
                                 "expected True, False or None")
    if any(vote is False for _, vote in votes):
        driver.out.log(EvalSkippedRecord(step=step, time=driver.out.now(), model=current.uid if current else ""))
        return None
    model, specs = await league.eval_specs(step)
    if model is None or not specs:
        return None
    round = EvalRound(step, specs, OutcomeAggregator(anchor=model.uid))
    driver.eval_rounds.append(round)
    return round


class EvalRound:
    """One evaluation round being played: its games, which have been handed out and which have
    finished, and the running outcome counts. A run snapshot taken while it plays saves the
    games not yet finished with the counts so far; resuming plays those and reports the round."""

    def __init__(self, step: int, specs: list[GameSpec], agg: OutcomeAggregator) -> None:
        self.step, self.specs, self.agg = step, specs, agg
        self.taken = 0
        self.finished: set[int] = set()

    async def next_specs(self, n: int) -> list[GameSpec]:
        self.taken += n
        return self.specs[self.taken - n : self.taken]

    def add(self, results: list[GameResult]) -> None:
        self.agg.add_all(results)
        self.finished.update(r.game.game_idx for r in results)

    def state_dict(self) -> dict[str, Any]:
        unfinished = [s.model_dump(mode="json") for s in self.specs if s.game_idx not in self.finished]
        return {"step": self.step, "specs": unfinished, "counts": self.agg.state_dict()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EvalRound:
        agg = OutcomeAggregator(anchor=None)
        agg.load_state_dict(state["counts"])
        return cls(state["step"], [GameSpec.model_validate(s) for s in state["specs"]], agg)


async def play_round(driver: Any, round: EvalRound) -> list[EvalRecord]:
    """Play a started round's games through the driver's lanes and report it (``EvalRecord`` per
    env and opponent, ``unstable_validation_end``)."""
    try:
        await driver.lanes(driver.cfg.collection.num_eval_games, round.next_specs, round.add)
    finally:
        driver.eval_rounds.remove(round)
    records = round.agg.records(round.step, driver.out.now())
    driver.publish_eval(records)
    driver.system.call_lifecycle("unstable_validation_end", ctx=ValidationEndContext(
        run_dir=driver.run_dir, learner_step=round.step, records=[r.model_dump(mode="json") for r in records]))
    return records
