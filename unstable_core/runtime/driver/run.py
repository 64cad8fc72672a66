"""A whole run, in order: the one place that tells what happens from start to end.

    start:  run directory (refused if it holds a run, unless resuming) -> the snapshot to go on
            from -> trackers -> executor -> config.json, plugins.json, the start record ->
            the executor starts the roles (in a thread: models may load for minutes) ->
            restore the snapshot -> registry.json -> ``unstable_run_start``
    drive:  ``Driver.drive`` (driver.py): training or a tournament
    end:    whatever happened: the last ingest settles -> final summary and ratings ->
            registry.json -> the end record -> trackers closed -> executor shut down ->
            ``unstable_run_end`` -> a ``RunResult``

``Run`` (api.py) is the façade around it: signals, the event loop, ``stop()``.
"""

from __future__ import annotations

import asyncio

from ...errors import ComponentError, ConfigError, RunFailed, describe_error
from ...executors import RoleHandles, RoleRestart, restart_sink
from ...plugins import PluginSystem
from ...protocols import Executor
from ...records import EndRecord, EvalRecord, RestartRecord, StartRecord
from ...result import RunResult, RunStatus
from ...types import Checkpoint, RunEndContext, RunStartContext
from ..building import Builder
from ..plan import RunPlan
from ..roles.start import start_roles
from ..rundir.output import RunOutput, prepare_run_dir
from ..rundir.resume import ResumeCheck, check_resume
from .driver import Driver
from .state import RunContext


class RunSteps:
    """One run of ``plan`` from start to end (``execute``); ``roles`` and ``driver`` once built."""

    def __init__(self, plan: RunPlan, plugins: PluginSystem, resume: bool, repair: bool = False) -> None:
        self.plan = plan
        self.plugins = plugins
        self.resume = resume
        self.repair = repair
        self.executor: Executor | None = None
        self.roles: RoleHandles | None = None
        self.driver: Driver | None = None
        self.result = RunResult(status="interrupted", run_dir=plan.run_dir)

    async def execute(self) -> RunResult:
        plan, plugins = self.plan, self.plugins
        prepare_run_dir(plan.run_dir, resume=self.resume)
        checked = check_resume(plan, self.repair) if self.resume else ResumeCheck()  # before anything is written
        snapshot = checked.snapshot
        if snapshot is not None and plan.trains and snapshot[0] > plan.config.training.learning_steps:
            raise ConfigError(f"training.learning_steps = {plan.config.training.learning_steps} is fewer than the "
                              f"{snapshot[0]} updates {plan.run_dir} has made: a resumed run can only go on")
        output = RunOutput(plan, plugins)
        output.repair = self.repair
        output.repaired += checked.repaired
        status: RunStatus = "completed"
        error: str | None = None
        # executors report restarts here: this task's context, so the tasks and threads the run starts
        sink = restart_sink.set(lambda event: self.on_restart(output, event))
        try:
            builder = Builder(plan, plugins)
            self.executor = executor = builder.build("executor")
            output.write_json("config.json", {"config": plan.config.model_dump(mode="json"),
                                              "components": {k: {"name": r.name, **r.options} for k, r in plan.recipes.items()}})
            records = [r.as_dict() for r in plugins.plugin_records()]
            output.write_json("plugins.json", records)
            c = plan.config
            start = StartRecord(name=c.name, mode="train" if plan.trains else "tournament", run_dir=plan.run_dir,
                                total=c.training.learning_steps if plan.trains else c.collection.tournament_games,
                                resumed=snapshot is not None, started_over=checked.started_over, config=c.model_dump(mode="json"), plugins=records)
            if snapshot is None:  # a resumed run's log is cut back to its snapshot first
                output.log(start)
            self.roles = roles = await start_roles(executor, plan, builder.label("executor"))
            run = RunContext(cfg=plan.config, run_dir=plan.run_dir, roles=roles, out=output, system=plugins)
            self.driver = driver = Driver(run, await roles.buffer.capacity())
            if snapshot is not None:
                await driver.snapshots.restore(*snapshot)
                output.log(start.model_copy(update={"step": run.state.step, "time": output.now()}))
            output.write_json("registry.json", await roles.league.snapshot())
            plugins.call_lifecycle("unstable_run_start", ctx=RunStartContext(
                run_dir=plan.run_dir, config=plan.config.model_dump(mode="json"), plugins=records))
            await driver.drive()
            state = run.state
            if state.games_played and sum(state.failures.values()) == state.games_played:
                raise RunFailed(f"every game failed ({state.games_played}); failures by reason: {dict(state.failures)}")
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except BaseException as exc:
            status, error = "failed", describe_error(exc)
            raise
        finally:
            try:
                self.result = await self.finish(output, status, error)
            finally:
                restart_sink.reset(sink)
        return self.result

    def on_restart(self, output: RunOutput, event: RoleRestart) -> None:
        """An executor restarted a role (``report_restart``): a ``restart`` record, counted."""
        state = self.driver.state if self.driver is not None else None
        if state is not None:
            state.restarts += 1
        output.log(RestartRecord(step=state.step if state is not None else 0, time=output.now(), role=event.role,
                                 cause=event.cause, pid=event.pid, restarts=event.restarts, max_restarts=event.max_restarts))

    async def finish(self, output: RunOutput, status: RunStatus, error: str | None) -> RunResult:
        """Flush everything, whatever happened; a failure here does not hide the first one."""
        steps = games = 0
        records: list[EvalRecord] = []
        ratings: dict[str, dict[str, float]] = {}
        checkpoints: list[Checkpoint] = []
        driver = self.driver
        if driver is not None:
            try:
                await driver.collector.settled()
                await driver.reporter.summary()  # with the final ratings record
                registry = await driver.run.roles.league.snapshot()
                output.write_json("registry.json", registry)
                ratings = {m["uid"]: m["rating"] for m in registry.get("models", []) if m.get("rating")}
            except Exception:
                if status == "completed":
                    raise
            steps, games, records = driver.state.step, driver.state.games_played, driver.state.eval_records
            checkpoints = driver.state.checkpoints
        close_errors = []
        try:
            output.log(EndRecord(step=steps, time=output.now(), status=status, games=games, error=error))
        except ComponentError as exc:
            close_errors.append(str(exc))
        close_errors += output.close()
        if self.executor is not None:
            self.executor.shutdown()
        end = RunEndContext(run_dir=self.plan.run_dir, learner_steps=steps, games_played=games, status=status, error=error)
        try:
            self.plugins.call_lifecycle("unstable_run_end", ctx=end)
        except ComponentError:
            if status == "completed":
                raise  # otherwise the first failure is the one to report
        if close_errors and status == "completed":
            raise RunFailed("; ".join(close_errors))
        return RunResult(status=status, run_dir=self.plan.run_dir, learner_steps=steps, games_played=games,
                         eval_records=records, checkpoints=checkpoints, ratings=ratings, error=error)
