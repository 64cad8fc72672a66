"""Evaluation rounds: the current model against every fixed opponent on every evaluation env.

A round is capped at ``eval_games`` per (checkpoint, env, opponent) by the league; plugins may
veto it (``unstable_validation_start``). Its games go through the driver's lanes (in sync mode,
rounds in game order) and are aggregated into one ``EvalRecord`` per (env, opponent).
"""

from __future__ import annotations

from typing import Any

from ..errors import ComponentError
from ..records import EvalRecord, EvalSkippedRecord
from ..types import GameSpec, ValidationEndContext, ValidationStartContext
from .stats import OutcomeAggregator


async def evaluate(driver: Any, step: int) -> list[EvalRecord]:
    c, league = driver.cfg.collection, driver.roles.league
    fixed = await league.fixed()
    if not fixed or not driver.cfg.evaluation_envs or c.eval_games == 0:
        return []
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
        return []
    model, specs = await league.eval_specs(step)
    if model is None or not specs:
        return []
    taken = 0

    async def next_specs(n: int) -> list[GameSpec]:
        nonlocal taken
        taken += n
        return specs[taken - n : taken]

    agg = OutcomeAggregator(anchor=model.uid)
    await driver.lanes(c.num_eval_games, next_specs, agg.add_all)
    records = agg.records(step, driver.out.now())
    driver.publish_eval(records)
    driver.system.call_lifecycle("unstable_validation_end", ctx=ValidationEndContext(
        run_dir=driver.run_dir, learner_step=step, records=[r.model_dump(mode="json") for r in records]))
    return records
