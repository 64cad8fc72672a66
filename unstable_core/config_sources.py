"""Where a run's config comes from: a TOML path, a dict or a ``RunConfig`` (with ``--set``
overrides), or the run directory being resumed (its ``config.json``)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .config import RunConfig, load_config, validate_config
from .config_loading import apply_overrides, override_list
from .errors import ConfigError

ConfigSource = str | os.PathLike[str] | Mapping[str, Any] | RunConfig
#: what ``--set`` may change when resuming: anything else would not continue the same run
RESUME_OVERRIDES = ("training.learning_steps",)


def load_run_config(config: ConfigSource, overrides: Iterable[str] = ()) -> tuple[RunConfig, str]:
    """(validated config, where it came from) from a path, a dict or a RunConfig."""
    overrides = override_list(overrides)
    if isinstance(config, RunConfig):
        if not overrides:
            return config, "<RunConfig>"
        return validate_config(apply_overrides(config.model_dump(mode="json"), overrides), "<RunConfig>"), "<RunConfig>"
    if isinstance(config, Mapping):
        return validate_config(apply_overrides(dict(config), overrides), "<dict>"), "<dict>"
    if isinstance(config, (str, os.PathLike)):
        return load_config(config, overrides), str(config)
    raise ConfigError(f"config must be a path, a dict or a RunConfig, not {type(config).__name__}")


def resumed_config(config: ConfigSource | None, run_dir: str | os.PathLike[str] | None,
                   overrides: Iterable[str]) -> tuple[RunConfig, str]:
    """The config saved in ``run_dir/config.json``, with the allowed overrides."""
    if run_dir is None:
        raise ConfigError("resume needs the run directory to go on from")
    overrides = override_list(overrides)
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
        ignore: Any = {"training": {"learning_steps"}, "run_dir": True}
        if given.model_dump(exclude=ignore) != cfg.model_dump(exclude=ignore):
            raise ConfigError(f"the config differs from the one {run_dir} was started with; resume without a config "
                              "(it is read from the run directory), or start a new run")
    return cfg, str(path)
