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
import os
import signal
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config_sources import ConfigSource, load_run_config, resumed_config
from .errors import ConfigError, RunInterrupted
from .result import RunResult

if TYPE_CHECKING:  # pragma: no cover
    from .executors import RoleHandles
    from .plugins import PluginSystem
    from .runtime.driver.run import RunSteps
    from .runtime.plan import RunPlan


def default_run_dir(name: str) -> str:
    return str(Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")


class Run:
    """A checked run, ready to start: config validated, components resolved, every environment
    and model checked, nothing written yet (``build`` makes one)."""

    def __init__(self, plan: RunPlan, plugins: PluginSystem, resume: bool = False, repair: bool = False,
                 quiet: bool = False) -> None:
        self.plan = plan
        #: print nothing while running (for notebooks): no set-up progress lines (and no console tracker, see ``build``)
        self.quiet = quiet
        self.plugins = plugins
        #: go on from the run directory's latest snapshot instead of starting afresh
        self.resume = resume
        #: resuming, go on with a damaged metrics log instead of refusing it (the resume record says what)
        self.repair = repair
        self.run_dir = plan.run_dir
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._signal: int | None = None
        self._steps: RunSteps | None = None
        self._stopped = False

    @property
    def roles(self) -> RoleHandles | None:
        """The executor's role handles once started (in-process role objects with ``local``)."""
        return self._steps.roles if self._steps is not None else None

    def start(self) -> RunResult:
        """Run to the end in this thread. Ctrl-C and SIGTERM stop it cleanly, everything
        flushed, and raise ``RunInterrupted`` (exit status 130 / 143 in the CLI); ``stop()``
        from another thread returns a result with status ``interrupted``."""
        if not self.quiet:
            return asyncio.run(self._main())
        from .progress import set_sink

        previous = set_sink(lambda task, finished: None)
        try:
            return asyncio.run(self._main())
        finally:
            set_sink(previous)

    def stop(self) -> None:
        """Stop a run from any thread (or a callback): it ends as ``interrupted``; called before
        ``start()``, the run does not start."""
        self._stopped = True
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)

    async def _main(self) -> RunResult:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        if self._stopped:  # stop() came first
            return RunResult(status="interrupted", run_dir=self.run_dir)
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            # signal.signal, as asyncio.Runner does for Ctrl-C, rather than loop.add_signal_handler,
            # which lists every valid signal on each call and does not exist on Windows
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._signal_received)
        try:
            return await self.run_async()
        except asyncio.CancelledError:
            if self._signal is not None:
                raise RunInterrupted(self._signal) from None
            return self._steps.result if self._steps is not None else RunResult(status="interrupted", run_dir=self.run_dir)
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
        """Run to the end on the running event loop (``runtime/driver/run.py`` tells it in order)."""
        from .runtime.driver.run import RunSteps

        self._steps = RunSteps(self.plan, self.plugins, self.resume, self.repair)
        return await self._steps.execute()


def build(config: ConfigSource | None, *, run_dir: str | os.PathLike[str] | None = None, overrides: Iterable[str] = (),
          plugins: PluginSystem | None = None, resume: bool = False, repair: bool = False, quiet: bool = False) -> Run:
    """Check a config (a TOML path, a dict or a RunConfig) and make its run, not started yet.
    Raises ConfigError / PluginError (exit status 2 in the CLI) for anything wrong with it.

    ``resume=True`` goes on from the latest snapshot in ``run_dir``, with the config the run was
    started with (``config`` may be None; if given it must be that config); ``overrides`` may
    only extend ``training.learning_steps``. ``repair=True`` (with ``resume``) goes on with a
    metrics log that was cut, deleted or edited within what the snapshot covers, instead of
    refusing it: its complete lines are kept, and the resume record's ``repaired`` says what.
    ``quiet=True`` (for notebooks) leaves out the ``console`` tracker and set-up progress lines;
    the other trackers write as configured."""
    from .runtime.plan import make_plan

    if repair and not resume:
        raise ConfigError("repair=True (--repair) goes with resume=True (--resume RUN_DIR)")
    if resume:
        cfg, source = resumed_config(config, run_dir, overrides)
    else:
        if config is None:
            raise ConfigError("a config is needed (None only with resume=True)")
        cfg, source = load_run_config(config, overrides)
    from .plugins import checked_plugins

    plugins = checked_plugins(plugins)
    if quiet:
        cfg = cfg.model_copy(update={"trackers": [t for t in cfg.trackers if t.name != "console"]})
    directory = str(run_dir) if run_dir is not None else (cfg.run_dir or default_run_dir(cfg.name))
    return Run(make_plan(cfg, plugins, directory, source), plugins, resume=resume, repair=repair, quiet=quiet)


def run(config: ConfigSource | None, *, run_dir: str | os.PathLike[str] | None = None, overrides: Iterable[str] = (),
        plugins: PluginSystem | None = None, resume: bool = False, repair: bool = False, quiet: bool = False) -> RunResult:
    """Build and start a run; return how it ended (``eval_records`` holds the evaluation or
    tournament records, ``checkpoints`` and ``ratings`` what it left). A run that cannot go on
    raises RunFailed. ``resume``, ``repair``, ``quiet``: see ``build``."""
    return build(config, run_dir=run_dir, overrides=overrides, plugins=plugins, resume=resume, repair=repair,
                 quiet=quiet).start()
