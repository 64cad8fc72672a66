"""bench/gpu_check.py, and the benches that take --device cuda, on a machine without a GPU: one
line and exit status 2, before any work."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[3] / "bench"
SCRIPT = BENCH / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the check would run")
@pytest.mark.parametrize("args", [["gpu_check.py", "--quick"], ["generation_memory.py", "--device", "cuda"],
                                  ["mixed_adapters.py", "--quick", "--device", "cuda"]], ids=lambda a: a[0])
def test_gpu_benches_exit_2_with_one_line_without_a_gpu(args):
    done = subprocess.run([sys.executable, str(BENCH / args[0]), *args[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert "no CUDA GPU" in lines[0] and "docs/gpu.md" in lines[0]


def test_gpu_check_refuses_an_unknown_shape_with_one_line():
    done = subprocess.run([sys.executable, str(SCRIPT), "--shapes", "qwen3-70b"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert lines == ["gpu_check: unknown shape 'qwen3-70b'; known: qwen3-0.6b, qwen3-1.7b"]
