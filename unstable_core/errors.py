"""User-facing errors. The CLI prints them without a traceback and exits with status 2."""

from __future__ import annotations


class UnstableError(Exception):
    """Base of every error caused by input (config, options, plugin results), not by a bug."""

    exit_code = 2


class ConfigError(UnstableError):
    """A config file or override is wrong; the message names the file and the key path."""


class PluginError(UnstableError):
    """A plugin is broken or missing; the message names the plugin and its distribution."""


class UnknownComponentError(PluginError):
    """A config asks for a component no loaded plugin provides."""
