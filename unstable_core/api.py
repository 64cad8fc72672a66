"""The Python API: ``run(config)`` and the ``build(config)`` builder. The CLI is a thin layer
over it.

    import unstable_core
    result = unstable_core.run("examples/tournament.toml", run_dir="runs/t1")
    for r in result.eval_records:
        print(r.env_id, r.model, r.opponent, r.win_rate)

    job = unstable_core.build({"name": "toy", ...}, overrides=["training.learning_steps=5"])
    result = job.start()          # blocks; job.stop() from another thread ends it cleanly
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .config import RunConfig, load_config, validate_config
from .config_loading import apply_overrides
from .errors import ComponentError, ConfigError, RunFailed, RunInterrupted, describe_error
from .records import EndRecord, EvalRecord, StartRecord
from .types import RunEndContext, RunStartContext


class RunResult(BaseModel):
    """How a run ended."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["completed", "interrupted", "failed"]
    run_dir: str
    learner_steps: int = 0
    games_played: int = 0
    eval_records: list[EvalRecord] = Field(default_factory=list, description="Every evaluation (or tournament) record.")
    error: str | None = None


def load_run_config(config: str | os.PathLike[str] | Mapping[str, Any] | RunConfig, overrides: Iterable[str] = ()) -> tuple[RunConfig, str]:
    """(validated config, where it came from) from a path, a dict or a RunConfig."""
    overrides = list(overrides)
    if isinstance(config, RunConfig):
        if not overrides:
            return config, "<RunConfig>"
        return validate_config(apply_overrides(config.model_dump(mode="json"), overrides), "<RunConfig>"), "<RunConfig>"
    if isinstance(config, Mapping):
        return validate_config(apply_overrides(dict(config), overrides), "<dict>"), "<dict>"
    if isinstance(config, (str, os.PathLike)):
        return load_config(config, overrides), str(config)
    raise ConfigError(f"config must be a path, a dict or a RunConfig, not {type(config).__name__}")


def default_run_dir(name: str) -> str:
    return str(Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")


class Run:
    """A checked run, ready to start: config validated, components resolved, every environment
    and model checked, nothing written yet (``build`` makes one)."""

    def __init__(self, plan: Any, plugins: Any, resume: bool = False) -> None:
        self.plan = plan
        self.plugins = plugins
        #: go on from the run directory's latest snapshot instead of starting afresh
        self.resume = resume
        self.run_dir = plan.run_dir
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._signal: int | None = None
        self._result = RunResult(status="interrupted", run_dir=self.run_dir)
        #: the executor's role handles once started (in-process role objects with `local`)
        self.roles: Any = None

    def start(self) -> RunResult:
        """Run to the end in this thread. Ctrl-C and SIGTERM stop it cleanly, everything
        flushed, and raise ``RunInterrupted`` (exit status 130 / 143 in the CLI); ``stop()``
        from another thread returns a result with status ``interrupted``."""
        return asyncio.run(self._main())

    def stop(self) -> None:
        """Stop a started run from any thread (or a callback): it ends as ``interrupted``."""
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    async def _main(self) -> RunResult:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            # signal.signal, as asyncio.Runner does for Ctrl-C, rather than loop.add_signal_handler,
            # which lists every valid signal on each call (0.2 ms) and does not exist on Windows
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._signal_received)
        try:
            return await self.run_async()
        except asyncio.CancelledError:
            if self._signal is not None:
                raise RunInterrupted(self._signal) from None
            return self._result
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def _signal_received(self, signum: int, frame: Any) -> None:
        """Runs in the main thread between two bytecodes, wherever it is: hands the signal to the
        event loop (waking it if it waits)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_signal, signum)

    def _on_signal(self, signum: int) -> None:
        if self._signal is None and self._task is not None:
            self._signal = signum
            self._task.cancel()

    async def run_async(self) -> RunResult:
        """Run to the end on the running event loop."""
        from .runtime.driver import Driver
        from .runtime.output import RunOutput, prepare_run_dir
        from .runtime.plan import Builder

        from .runtime.resume import restore
        from .runtime.roles import start_roles
        from .runtime.snapshots import read_latest

        plan, plugins = self.plan, self.plugins
        prepare_run_dir(plan.run_dir, resume=self.resume)
        snapshot = read_latest(plan.run_dir) if self.resume else None  # before anything is written
        output = RunOutput(plan, plugins)
        executor: Any = None
        driver: Driver | None = None
        status, error = "completed", None
        try:
            executor = Builder(plan, plugins).build("executor")
            output.write_json("config.json", {"config": plan.config.model_dump(mode="json"),
                                              "components": {k: {"name": r.name, **r.options} for k, r in plan.recipes.items()}})
            records = [r.as_dict() for r in plugins.plugin_records()]
            output.write_json("plugins.json", records)
            c = plan.config
            start = StartRecord(name=c.name, mode="train" if plan.trains else "tournament", run_dir=str(self.run_dir),
                                total=c.training.learning_steps if plan.trains else c.collection.tournament_games,
                                resumed=snapshot is not None, config=c.model_dump(mode="json"), plugins=records)
            if snapshot is None:  # a resumed run's log is cut back to its snapshot first
                output.log(start)
            self.roles = await start_roles(executor, plan)  # in a thread: it may load models for minutes
            driver = Driver(plan, self.roles, output, plugins)
            if snapshot is not None:
                await restore(driver, *snapshot)
                output.log(start.model_copy(update={"step": driver.state.step, "time": output.now()}))
            output.write_json("registry.json", await driver.roles.league.snapshot())
            plugins.call_lifecycle("unstable_run_start", ctx=RunStartContext(
                run_dir=self.run_dir, config=plan.config.model_dump(mode="json"), plugins=records))
            await driver.run()
            state = driver.state
            if state.games_played and sum(state.failures.values()) == state.games_played:
                raise RunFailed(f"every game failed ({state.games_played}); failures by reason: {dict(state.failures)}")
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except BaseException as exc:
            status, error = "failed", describe_error(exc)
            raise
        finally:
            self._result = await self._finish(driver, output, executor, status, error)
        return self._result

    async def _finish(self, driver: Any, output: Any, executor: Any, status: str, error: str | None) -> RunResult:
        """Flush everything, whatever happened; a failure here does not hide the first one."""
        steps = games = 0
        records: list[EvalRecord] = []
        if driver is not None:
            try:
                await driver.settled()
                await driver.summary()  # with the final ratings record
                output.write_json("registry.json", await driver.roles.league.snapshot())
            except Exception:
                if status == "completed":
                    raise
            steps, games, records = driver.state.step, driver.state.games_played, driver.state.eval_records
        close_errors = []
        try:
            output.log(EndRecord(step=steps, time=output.now(), status=status, games=games, error=error))
        except ComponentError as exc:
            close_errors.append(str(exc))
        close_errors += output.close()
        if executor is not None:
            executor.shutdown()
        end = RunEndContext(run_dir=self.run_dir, learner_steps=steps, games_played=games, status=status, error=error)
        try:
            self.plugins.call_lifecycle("unstable_run_end", ctx=end)
        except ComponentError:
            if status == "completed":
                raise  # otherwise the first failure is the one to report
        
        if close_errors and status == "completed":
            raise RunFailed("; ".join(close_errors))
        return RunResult(status=status, run_dir=self.run_dir, learner_steps=steps, games_played=games,
                         eval_records=records, error=error)


ConfigSource = str | os.PathLike[str] | Mapping[str, Any] | RunConfig
#: what ``--set`` may change when resuming: anything else would not continue the same run
RESUME_OVERRIDES = ("training.learning_steps",)


def build(config: ConfigSource | None, *, run_dir: str | os.PathLike[str] | None = None, overrides: Iterable[str] = (),
          plugins: Any = None, resume: bool = False) -> Run:
    """Check a config (a TOML path, a dict or a RunConfig) and make its run, not started yet.
    Raises ConfigError / PluginError (exit status 2 in the CLI) for anything wrong with it.

    ``resume=True`` goes on from the latest snapshot in ``run_dir``, with the config the run was
    started with (``config`` may be None; if given it must be that config); ``overrides`` may
    only extend ``training.learning_steps``."""
    from .runtime.plan import make_plan

    if resume:
        cfg, source = resumed_config(config, run_dir, overrides)
    else:
        if config is None:
            raise ConfigError("a config is needed (None only with resume=True)")
        cfg, source = load_run_config(config, overrides)
    if plugins is None:
        from .plugins import get_plugin_system

        plugins = get_plugin_system()
    directory = str(run_dir) if run_dir is not None else (cfg.run_dir or default_run_dir(cfg.name))
    return Run(make_plan(cfg, plugins, directory, source), plugins, resume=resume)


def resumed_config(config: ConfigSource | None, run_dir: str | os.PathLike[str] | None,
                   overrides: Iterable[str]) -> tuple[RunConfig, str]:
    """The config saved in ``run_dir/config.json``, with the allowed overrides."""
    if run_dir is None:
        raise ConfigError("resume needs the run directory to go on from")
    overrides = list(overrides)
    for item in overrides:
        if item.split("=", 1)[0].strip() not in RESUME_OVERRIDES:
            raise ConfigError(f"--set {item}: when resuming only {', '.join(RESUME_OVERRIDES)} may change")
    path = Path(run_dir) / "config.json"
    try:
        saved = json.loads(path.read_text())["config"]
    except FileNotFoundError:
        raise ConfigError(f"{run_dir} is not a run directory (no config.json): nothing to resume") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: unreadable ({exc})") from None
    cfg = validate_config(apply_overrides(saved, overrides), str(path))
    if config is not None:
        given, _ = load_run_config(config)
        ignore = {"training": {"learning_steps"}, "run_dir": True}
        if given.model_dump(exclude=ignore) != cfg.model_dump(exclude=ignore):
            raise ConfigError(f"the config differs from the one {run_dir} was started with; resume without a config "
                              "(it is read from the run directory), or start a new run")
    return cfg, str(path)


def run(config: ConfigSource | None, *, run_dir: str | os.PathLike[str] | None = None, overrides: Iterable[str] = (),
        plugins: Any = None, resume: bool = False) -> RunResult:
    """Build and start a run; return how it ended (``eval_records`` holds the evaluation or
    tournament records). A run that cannot go on raises RunFailed. ``resume``: see ``build``."""
    return build(config, run_dir=run_dir, overrides=overrides, plugins=plugins, resume=resume).start()
