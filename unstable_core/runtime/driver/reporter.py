"""The run's periodic records: a ``summary`` (counts, rates, buffer, per-env totals) with the
league's ``ratings`` (the pairs of models that played since the previous one: a population of
hundreds of checkpoints has tens of thousands of pairs), and the evaluation records as rounds
report them."""

from __future__ import annotations

from ...records import EvalRecord, RatingsRecord, SummaryRecord
from .state import RunContext


class Reporter:
    def __init__(self, run: RunContext, capacity: int) -> None:
        self.run = run
        self.capacity = capacity  # the buffer's, read once
        self.last_summary = 0.0

    async def summary(self) -> None:
        run, state = self.run, self.run.state
        self.last_summary = now = run.out.now()
        run.out.flush()
        run.out.log(SummaryRecord(
            step=state.step, time=now, games=state.games_played, games_per_s=state.games_played / max(now, 1e-9),
            failed=sum(state.failures.values()), failures=dict(state.failures), buffer_size=await run.roles.buffer.size(),
            buffer_capacity=self.capacity, dropped_zero_advantage=state.dropped,
            generated_tokens=state.stats.generated_tokens, restarts=state.restarts, envs=state.stats.snapshot(),
        ))
        snapshot = await run.roles.league.snapshot()
        changed = [p for p in snapshot["pairs"] if state.reported_pairs.get((p["a"], p["b"])) != p["games"]]
        state.reported_pairs.update(((p["a"], p["b"]), p["games"]) for p in changed)
        run.out.log(RatingsRecord(step=state.step, time=now, games=state.games_played, ratings=snapshot["ratings"],
                                  pairs=changed, model_games={m["uid"]: m["games"] for m in snapshot["models"]}))

    def publish_eval(self, records: list[EvalRecord]) -> None:
        for record in records:
            self.run.out.log(record)
        self.run.state.eval_records += records
