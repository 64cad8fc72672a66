import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def cluster():
    """One local Ray cluster for the test session (the executor uses the Ray initialised in its
    process); its address, for child processes that connect to it."""
    import ray

    from unstable_ray.environment import prepare_local_cluster

    prepare_local_cluster()  # as the executor does for a cluster of its own
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
