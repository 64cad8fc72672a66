"""Nothing a run writes lies outside its run directory (and the model cache): the examples run in
a sandbox (their own working directory, home and temporary folder), then every file in it is
listed."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: example -> (the plugin module it needs, overrides that keep it short; kuhn-tiny's model gets a
#: 2-step warm start: every stage of its build runs in the sandbox in seconds, where the example's
#: 150 steps take about 90 s)
EXAMPLES = {
    "tournament": (None, ["collection.tournament_games=30"]),
    "trueskill-tournament": ("unstable_trueskill", ["collection.tournament_games=30"]),
    "openspiel-kuhn-tournament": ("unstable_openspiel", ["collection.tournament_games=30"]),
    "kuhn-tiny": ("unstable_hf", ["training.learning_steps=2", "training.batch_size=8", "collection.eval_games=4",
                                  "training.save_every=1", "model.model=tiny:KuhnPoker-v0-train?sft_steps=2"]),
}


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_every_file_a_run_writes_is_in_its_run_directory(example, tmp_path):
    module, overrides = EXAMPLES[example]
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    work, home, tmp = tmp_path / "work", tmp_path / "home", tmp_path / "tmp"
    for folder in (work, home, tmp):
        folder.mkdir()
    cache = Path(os.environ.get("UNSTABLE_CACHE", Path.home() / ".cache" / "unstable"))  # models: built once, shared
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "UNSTABLE_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    run_dir = work / "run"
    sets = [a for o in overrides for a in ("--set", o)]
    proc = subprocess.run([sys.executable, "-c", "from unstable_core.entry import main; main()", "run",
                           str(ROOT / "examples" / f"{example}.toml"), "--run-dir", str(run_dir), *sets],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and run_dir not in p.parents]
    assert not outside, f"{example} wrote outside its run directory: {[str(p.relative_to(tmp_path)) for p in outside][:10]}"
    assert (run_dir / "metrics.jsonl").is_file()
