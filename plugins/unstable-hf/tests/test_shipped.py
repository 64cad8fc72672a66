"""The tiny models shipped built (``unstable_hf/shipped.py``): pinned, installed instead of built,
checked by hash each time they are handed out."""

import os
import tomllib
from pathlib import Path

import pytest

from unstable_hf import shipped
from unstable_hf.tiny import TinySpec, ensure_tiny

#: SHA-256 of each shipped build's weights: a rebuilt or changed shipped model changes a figure the
#: docs give, so it must change this table too (and the docs' figures be measured again)
PINNED_WEIGHTS = {
    "tiny:KuhnPoker-v0-train?sft_steps=150": "c786c719fe2f417b21d0009975fbfda2f40b249a1c9cb7b9d9538249937e3a13",
    "tiny:openspiel/kuhn_poker?sft_agent=cfr&sft_backend=openspiel&sft_targets=policy&sft_mix=0.2&sft_steps=3000":
        "e362d64f6a8eb55e4705e4c60ae0c29c93230b540ba35c2989f55fd324403517",
    "tiny:openspiel/leduc_poker?sft_agent=cfr:200&sft_backend=openspiel&sft_targets=policy&sft_mix=0.2&sft_steps=600":
        "3948c89ffb7af83bb2736e873808ae08e47b3237136a5d0261ba7ce0cd64c7ce",
}
#: examples whose tiny model builds on the machine (docs/reproducing.md says why)
NOT_SHIPPED = {"tictactoe-tiny.toml"}
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
KUHN = "tiny:KuhnPoker-v0-train?sft_steps=150"


def installed(spec: str) -> bool:
    """Whether the env provider a spec's key names is installed (an OpenSpiel spec's key holds the
    openspiel plugin's version; unstable-hf alone has only TextArena's)."""
    import importlib.util

    return not spec.startswith("tiny:openspiel/") or importlib.util.find_spec("unstable_openspiel") is not None


@pytest.fixture
def no_build(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a shipped spec was built")

    monkeypatch.setattr("unstable_hf.tiny.build_tiny", refuse)
    monkeypatch.delenv(shipped.BUILD_ENV, raising=False)


def test_the_shipped_builds_are_the_pinned_ones_and_whole():
    builds = shipped.manifest()
    assert {b.spec: b.files["model.safetensors"] for b in builds.values()} == PINNED_WEIGHTS
    for key, build in builds.items():
        if installed(build.spec):
            assert TinySpec.parse(build.spec).key() == key  # the cache key a run computes finds it
        assert shipped.mismatched(build.source, build.files) == []
        assert {"config.json", "model.safetensors", "tokenizer.json", "unstable_tiny.json"} <= set(build.files)


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="the examples are beside a checkout only")
def test_the_examples_use_shipped_builds():
    specs = {p.name: tomllib.loads(p.read_text()).get("model", {}).get("model", "") for p in EXAMPLES.glob("*.toml")}
    if not installed("tiny:openspiel/"):
        pytest.skip("the OpenSpiel examples' keys need the openspiel plugin")
    tiny = {name: s for name, s in specs.items() if s.startswith("tiny") and name not in NOT_SHIPPED}
    assert len(tiny) >= 6 and {n for n, s in tiny.items() if TinySpec.parse(s).key() not in shipped.manifest()} == set()


def test_a_shipped_spec_is_installed_not_built(tmp_path, no_build):
    folder = ensure_tiny(TinySpec.parse(KUHN), tmp_path)
    build = shipped.manifest()[TinySpec.parse(KUHN).key()]
    assert folder == tmp_path / f"tiny-{build.key}"
    assert shipped.mismatched(folder, build.files) == []
    assert ensure_tiny(TinySpec.parse(KUHN), tmp_path) == folder  # handed out again as it is


def test_the_real_loading_path_runs_on_a_shipped_build(tmp_path, no_build):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = ensure_tiny(TinySpec.parse(KUHN), tmp_path)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert model.config.vocab_size == len(tok) and tok.eos_token == "<|im_end|>"


def test_another_build_under_the_shipped_key_is_replaced_by_the_shipped_one(tmp_path, no_build, caplog):
    """A folder built on this machine before the build was shipped, or damaged since: replaced."""
    spec = TinySpec.parse(KUHN)
    folder = ensure_tiny(spec, tmp_path)
    weights = folder / "model.safetensors"
    shipped_bytes = weights.read_bytes()
    weights.write_bytes(shipped_bytes[:-4] + b"\0\0\0\0")  # another CPU's rounding, in the last weights
    (folder / "stray.txt").write_text("x")
    assert ensure_tiny(spec, tmp_path) == folder
    assert weights.read_bytes() == shipped_bytes and not (folder / "stray.txt").exists()
    assert "replaced" in caplog.text


def test_a_damaged_shipped_build_is_refused_naming_the_file(tmp_path, monkeypatch, no_build):
    import shutil

    copy = tmp_path / "shipped_models"
    shutil.copytree(shipped.FOLDER, copy)
    monkeypatch.setattr(shipped, "FOLDER", copy)
    monkeypatch.setattr(shipped, "MANIFEST", copy / "manifest.json")
    key = TinySpec.parse(KUHN).key()
    (copy / f"tiny-{key}" / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=rf"tiny-{key} .* damaged: tokenizer.json .*UNSTABLE_TINY_BUILD=local"):
        ensure_tiny(TinySpec.parse(KUHN), tmp_path / "cache")


def test_building_locally_is_one_switch_away(tmp_path, monkeypatch):
    built = []

    def fake_build(spec, path, log=None):
        built.append(spec)
        Path(path, "unstable_tiny.json").write_text("{}")
        return Path(path)

    monkeypatch.setattr("unstable_hf.tiny.build_tiny", fake_build)
    monkeypatch.setenv(shipped.BUILD_ENV, "local")
    spec = TinySpec.parse(KUHN)
    assert ensure_tiny(spec, tmp_path) == tmp_path / f"tiny-{spec.key()}-local" and built == [spec]


def test_init_tiny_writes_the_shipped_build(tmp_path):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != shipped.BUILD_ENV}
    proc = subprocess.run([sys.executable, "-c", "from unstable_core.cli import main; main()", "models", "init-tiny",
                           str(tmp_path / "m"), "--spec", KUHN], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and "shipped" in proc.stdout, proc.stderr
    build = shipped.manifest()[TinySpec.parse(KUHN).key()]
    assert shipped.mismatched(tmp_path / "m", build.files) == []
