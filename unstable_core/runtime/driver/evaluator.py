"""Evaluation rounds: the current model against every fixed opponent on every evaluation env.

A round is capped at ``eval_games`` per (checkpoint, env, opponent) by the league; plugins may
veto it (``unstable_validation_start``). Its games go through the collector's lanes (in sync
mode, rounds in game order) and are aggregated into one ``EvalRecord`` per (env, opponent). A
round still playing when a run snapshot is taken (async mode) is saved with it and finished on
resume.
"""

from __future__ import annotations

from typing import Any

from ...errors import ComponentError
from ...progress import task
from ...records import EvalRecord, EvalSkippedRecord
from ...types import GameResult, GameSpec, ModelRef, ValidationEndContext, ValidationStartContext
from .collector import Collector
from .reporter import Reporter
from .state import RunContext
from .stats import OutcomeAggregator


class EvalRound:
    """One evaluation round being played: its games, which have been handed out and which have
    finished, and the running outcome counts. A run snapshot taken while it plays saves the
    games not yet finished with the counts so far; resuming plays those and reports the round."""

    def __init__(self, step: int, specs: list[GameSpec], agg: OutcomeAggregator, model: ModelRef | None = None,
                 mixtures: dict[str, list[tuple[ModelRef, float]]] | None = None) -> None:
        self.step, self.specs, self.agg, self.model = step, specs, agg, model
        self.mixtures = mixtures or {}  # the population's mixtures when the round started (eval_mixtures)
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
        model = self.model.model_dump(mode="json") if self.model is not None else None
        mixtures = {name: [[ref.model_dump(mode="json"), w] for ref, w in members] for name, members in self.mixtures.items()}
        return {"step": self.step, "specs": unfinished, "counts": self.agg.state_dict(), "model": model, "mixtures": mixtures}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EvalRound:
        agg = OutcomeAggregator(anchor=None)
        agg.load_state_dict(state["counts"])
        model = ModelRef.model_validate(state["model"]) if state.get("model") else None
        mixtures = {name: [(ModelRef.model_validate(ref), float(w)) for ref, w in members]
                    for name, members in (state.get("mixtures") or {}).items()}
        return cls(state["step"], [GameSpec.model_validate(s) for s in state["specs"]], agg, model, mixtures)


class Evaluator:
    def __init__(self, run: RunContext, collector: Collector, reporter: Reporter) -> None:
        self.run = run
        self.collector = collector
        self.reporter = reporter
        self.rounds: list[EvalRound] = []  # rounds being played (saved in snapshots)

    async def evaluate(self, step: int) -> list[EvalRecord]:
        round = await self.start_round(step)
        return [] if round is None else await self.play_round(round)

    async def start_round(self, step: int) -> EvalRound | None:
        """Decide the round (plugins may veto it) and schedule its games; it is listed from now
        on, so that a snapshot taken before its games are played holds it."""
        run = self.run
        c, league = run.cfg.collection, run.roles.league
        fixed = await league.fixed()
        if not fixed or not run.cfg.evaluation_envs or c.eval_games == 0:
            return None
        current = await league.current()
        ctx = ValidationStartContext(run_dir=run.run_dir, learner_step=step, model=current,
                                     env_ids=[e.env_id for e in run.cfg.evaluation_envs], opponents=[o.uid for o in fixed])
        votes = run.system.call_lifecycle("unstable_validation_start", ctx=ctx)
        for plugin, vote in votes:
            if not isinstance(vote, bool):
                raise ComponentError(f"{run.system.describe(plugin)}: hook unstable_validation_start returned {vote!r}; "
                                     "expected True, False or None")
        if any(vote is False for _, vote in votes):
            run.out.log(EvalSkippedRecord(step=step, time=run.out.now(), model=current.uid if current else ""))
            return None
        model, specs = await league.eval_specs(step)
        if model is None or not specs:
            return None
        mixtures = await league.mixtures(c.eval_mixtures) if c.eval_mixtures else {}
        round = EvalRound(step, specs, OutcomeAggregator(anchor=model.uid), model, mixtures)
        self.rounds.append(round)
        return round

    async def play_round(self, round: EvalRound) -> list[EvalRecord]:
        """Play a started round's games through the collector's lanes and report it
        (``EvalRecord`` per env and opponent, ``unstable_validation_end``)."""
        run = self.run
        label = round.model.uid if round.model is not None else "the model"
        try:  # its games show in a live dashboard's header (a 1,000-game baseline takes a while)
            with task(f"evaluating {label}", total=len(round.specs), plain=False) as progress:
                def add(results: list[GameResult]) -> None:
                    round.add(results)
                    progress.advance(len(results))

                await self.collector.lanes(run.cfg.collection.num_eval_games, round.next_specs, add)
        finally:
            self.rounds.remove(round)
        records = await self.with_policy_metrics(round, round.agg.records(round.step, run.out.now()))
        self.reporter.publish_eval(records)
        run.system.call_lifecycle("unstable_validation_end", ctx=ValidationEndContext(
            run_dir=run.run_dir, learner_step=round.step, records=[r.model_dump(mode="json") for r in records]))
        return records

    async def with_policy_metrics(self, round: EvalRound, records: list[EvalRecord]) -> list[EvalRecord]:
        """The records with the evaluated model's exact policy metrics on each env where its
        provider offers them (``collection.eval_policy_metrics``), and its population's
        mixtures' (``collection.eval_mixtures``)."""
        if not self.run.cfg.collection.eval_policy_metrics or round.model is None:
            return records
        rollout = self.run.roles.rollouts[0]
        metrics, mixtures = {}, {}
        for env in self.run.cfg.evaluation_envs:
            metrics[env.env_id] = await rollout.policy_metrics(round.model, env)
            found = {name: await rollout.mixture_metrics(members, env) for name, members in round.mixtures.items()}
            mixtures[env.env_id] = {name: figures for name, figures in found.items() if figures}
        return [r.model_copy(update={"policy": metrics.get(r.env_id, {}), "mixtures": mixtures.get(r.env_id, {})}) for r in records]

    def state_dict(self) -> list[dict[str, Any]]:
        return [r.state_dict() for r in self.rounds]

    def load_state_dict(self, rounds: list[dict[str, Any]]) -> None:
        self.rounds = [EvalRound.from_state(r) for r in rounds]
