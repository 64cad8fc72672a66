"""User-facing errors. The CLI prints them without a traceback and exits with status 2."""

from __future__ import annotations


def describe_error(exc: BaseException, limit: int = 300) -> str:
    """``Type: first line of the message``, for one-line reports: a longer line is cut at the
    last space before ``limit`` characters (never inside a word) and ends with ``...``."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > limit:
        cut = text.rfind(" ", 0, limit - 3)
        text = text[: cut if cut > limit // 2 else limit - 3].rstrip() + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class UnstableError(Exception):
    """Base of every error caused by input (config, options, plugin results), not by a bug."""

    exit_code = 2


class ConfigError(UnstableError):
    """A config file or override is wrong; the message names the file and the key path."""


class PluginError(UnstableError):
    """A plugin is broken or missing; the message names the plugin and its distribution."""


class UnknownComponentError(PluginError):
    """A config asks for a component no loaded plugin provides."""


class ComponentError(UnstableError):
    """A component (or a plugin's hook) raised or returned something malformed while a run went
    on; the message names the component, its plugin and distribution."""


class RunFailed(UnstableError):
    """The run could not go on (every game fails, a collapsed policy, a role died)."""


class RunInterrupted(UnstableError):
    """Ctrl-C (exit 130) or SIGTERM (exit 143): the run stopped cleanly, files flushed."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
