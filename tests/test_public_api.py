"""First-party and contrib plugins use only the public API of unstable_core: no import of
``unstable_core.builtin`` or ``unstable_core.runtime``, and no ``_``-name from anywhere in it."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_PACKAGES = ("unstable_core.builtin", "unstable_core.runtime")
PLUGIN_FILES = sorted(p for folder in ("plugins", "contrib") for p in (ROOT / folder).rglob("*.py"))


def violations(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "unstable_core":
            modules = [("unstable_core", node.attr)]
        else:
            continue
        for module, name in modules:
            if not module.startswith("unstable_core"):
                continue
            parts = module.split(".") + ([name] if name else [])
            if module.startswith(PRIVATE_PACKAGES) or any(p.startswith("_") for p in parts):
                found.append(f"line {node.lineno}: {module}" + (f".{name}" if name else ""))
    return found


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugin_code_uses_only_the_public_api(path):
    assert violations(path.read_text()) == [], f"{path.relative_to(ROOT)} reaches into unstable_core's internals"


def test_the_check_sees_each_kind_of_private_import():
    code = (
        "from unstable_core.builtin.templates import TEMPLATES\n"
        "import unstable_core.runtime.registry\n"
        "from unstable_core.types import _trusted\n"
        "from unstable_core.testing import _ToyPlugin\n"
        "import unstable_core\nx = unstable_core._LAZY\n"
        "from unstable_core import EnvSpec, build_component\n"
        "from unstable_core.testing import toy_config\n"
    )
    assert [v.split(":")[0] for v in violations(code)] == ["line 1", "line 2", "line 3", "line 4", "line 6"]


def test_every_public_name_resolves_and_is_documented():
    import unstable_core

    api_doc = (ROOT / "docs" / "api.md").read_text()
    for name in unstable_core.__all__:
        assert getattr(unstable_core, name) is not None
        assert f"`{name}`" in api_doc or f"`{name}(" in api_doc, f"docs/api.md does not mention the public name {name}"
