"""Wall time of `import unstable_core`, `unstable --help` and `unstable plugins list`.

    python bench/cli_startup.py [--repeat 15]

Each command runs in a fresh interpreter (what a user waits for); the table shows the median and
the best of the repeats. Target: `unstable plugins list` at most 0.3 s with every package installed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

TARGET_S = 0.3


def measure(cmd: list[str], repeat: int) -> list[float]:
    subprocess.run(cmd, capture_output=True, check=True)  # warm the file cache
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    exe = shutil.which("unstable") or f"{sys.executable} -m unstable_core.cli"
    cases = [
        ("python -c pass (baseline)", [sys.executable, "-c", "pass"]),
        ("import unstable_core", [sys.executable, "-c", "import unstable_core"]),
        ("unstable --help", [*exe.split(), "--help"]),
        ("unstable plugins list", [*exe.split(), "plugins", "list"]),
        ("unstable plugins list --all --json", [*exe.split(), "plugins", "list", "--all", "--json"]),
    ]
    print(f"{'command':<38} {'median s':>9} {'best s':>8}")
    print("-" * 57)
    results = {}
    for name, cmd in cases:
        times = measure(cmd, args.repeat)
        results[name] = statistics.median(times)
        print(f"{name:<38} {statistics.median(times):>9.3f} {min(times):>8.3f}")
    ok = results["unstable plugins list"] <= TARGET_S
    print(f"\nsummary: plugins_list_median_s={results['unstable plugins list']:.3f} target={TARGET_S} {'ok' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
