"""Generated reference docs are up to date with the code; links between the docs find their sections."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.mark.parametrize("script,target", [("gen_hooks.py", "hooks.md"), ("gen_config.py", "config.md")])
def test_generated_doc_is_current(script, target, tmp_path):
    before = (DOCS / target).read_text()
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools" / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(tmp_path)  # written beside, compared with the committed page
    assert (tmp_path / target).read_text() == before, f"run `python tools/{script}` and commit docs/{target}"


def test_every_config_key_documented():
    from unstable_core.config import CollectionConfig, RunConfig, TrainingConfig

    text = (DOCS / "config.md").read_text()
    for name in RunConfig.model_fields:
        assert f"`{name}`" in text
    for section, model in (("collection", CollectionConfig), ("training", TrainingConfig)):
        for name in model.model_fields:
            assert f"`{section}.{name}`" in text


def _anchors(text):
    import re

    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_link_to_a_section_of_the_docs_finds_it():
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md|)#([\w-]+)\)", page.read_text()):
            path = (page.parent / target).resolve() if target else page
            if not path.exists() or anchor not in _anchors(path.read_text()):
                broken.append(f"{page.relative_to(ROOT)}: {target or '(itself)'}#{anchor}")
    assert not broken, "\n".join(broken)


def test_readme_is_a_reference_and_no_page_speaks_of_sessions():
    import re

    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]
    diary = [f"{p.relative_to(ROOT)}:{n}" for p in pages for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\bsessions?\b", line, re.I)]
    assert not diary, diary


def test_the_index_lists_every_page():
    index = (DOCS / "index.md").read_text()
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "index.md" and f"({p.name})" not in index]
    assert not missing, missing
