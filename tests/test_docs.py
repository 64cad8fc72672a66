"""Generated reference docs are up to date with the code."""

import importlib.util
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("script,target", [("gen_hooks.py", "hooks.md"), ("gen_config.py", "config.md")])
def test_generated_doc_is_current(script, target, tmp_path, monkeypatch):
    before = (DOCS / target).read_text()
    spec = importlib.util.spec_from_file_location("gen", DOCS / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # write into a copy of the script's folder, compare with the committed file
    monkeypatch.setattr(mod, "__file__", str(tmp_path / script))
    mod.main()
    assert (tmp_path / target).read_text() == before, f"run `python docs/{script}` and commit docs/{target}"


def test_every_config_key_documented():
    from unstable_core.config import CollectionConfig, RunConfig, TrainingConfig

    text = (DOCS / "config.md").read_text()
    for name in RunConfig.model_fields:
        assert f"`{name}`" in text
    for section, model in (("collection", CollectionConfig), ("training", TrainingConfig)):
        for name in model.model_fields:
            assert f"`{section}.{name}`" in text
