"""A toy run for the resume tests, in its own process so that it can be killed:

    python tests/resume_child.py RUN_DIR CONFIG_JSON [--resume]

It prints one line per finished game ("g") and per learner update ("u"), so that the test can
kill it at a chosen point of its progress rather than after a guessed time.
"""

import json
import sys

import unstable_core
from unstable_core import hookimpl
from unstable_core.testing import toy_plugin


class Progress:
    @hookimpl
    def unstable_game_end(self, ctx):
        sys.stdout.write("g\n")
        sys.stdout.flush()

    @hookimpl
    def unstable_batch_end(self, ctx):
        sys.stdout.write("u\n")
        sys.stdout.flush()


if __name__ == "__main__":
    run_dir, cfg = sys.argv[1], json.loads(sys.argv[2])
    system = unstable_core.load_plugins(extra=[("toy", toy_plugin), ("progress", Progress())])
    resume = "--resume" in sys.argv[3:]
    unstable_core.run(None if resume else cfg, run_dir=run_dir, plugins=system, resume=resume)
