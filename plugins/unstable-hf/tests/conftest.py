import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    from unstable_hf.testing import build_fast_tiny

    return build_fast_tiny(tmp_path_factory.mktemp("tiny-cache"))


from unstable_hf.testing import shaped_folder  # noqa: E402,F401  (folders shaped like real checkpoints, once a session)
