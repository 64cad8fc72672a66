import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args, env=None, cwd=None, timeout=120, input=None):
    """Run `unstable ARGS` in a fresh interpreter; returns CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", "from unstable_core.cli import main; main()", *args],
        capture_output=True, text=True, env=full_env, cwd=cwd or ROOT, timeout=timeout, input=input,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def toy_system(make_plugin_system):
    from unstable_core.testing import toy_plugin

    return make_plugin_system(toy_plugin)
