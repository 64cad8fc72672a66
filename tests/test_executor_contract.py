"""The local executor passes the executor contract (against itself: the mechanics of the kit)."""

from unstable_core.testing import ExecutorContract


class TestLocalExecutor(ExecutorContract):
    name = "local"
