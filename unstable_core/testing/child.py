"""The child process of the kill-and-resume harness (``unstable_core.testing.resume``):

    python -m unstable_core.testing.child RUN_DIR CONFIG_JSON [--plugin MODULE:ATTR]... [--resume]

It runs (or resumes) the config with the installed plugins plus the named plugin objects, printing
"g" for every finished training or tournament game, "e" for every evaluation game and "u" for
every learner update.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

import unstable_core
from unstable_core import hookimpl


class Progress:
    @hookimpl
    def unstable_game_end(self, ctx: Any) -> None:
        sys.stdout.write("e\n" if ctx.result.game.mode == "eval" else "g\n")
        sys.stdout.flush()

    @hookimpl
    def unstable_batch_end(self, ctx: Any) -> None:
        sys.stdout.write("u\n")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m unstable_core.testing.child")
    parser.add_argument("run_dir")
    parser.add_argument("config")
    parser.add_argument("--plugin", action="append", default=[], help="MODULE:ATTR of a plugin object to load")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    extra: list[tuple[str, Any]] = []
    for path in args.plugin:
        module, _, attr = path.partition(":")
        extra.append((path, getattr(importlib.import_module(module), attr) if attr else importlib.import_module(module)))
    system = unstable_core.load_plugins(extra=[*extra, ("progress", Progress())])
    config = None if args.resume else json.loads(args.config)
    unstable_core.run(config, run_dir=args.run_dir, plugins=system, resume=args.resume)


if __name__ == "__main__":
    main()
