"""First-party and contrib plugins use only the public API of unstable_core: no import of
``unstable_core.builtin`` or ``unstable_core.runtime``, and no ``_``-name from anywhere in it.
Nowhere in the tree does a module import another module's ``_``-name."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_PACKAGES = ("unstable_core.builtin", "unstable_core.runtime")
TREE_FILES = sorted(p for p in ROOT.rglob("*.py") if not {".git", "build", ".venv", "venv"} & set(p.relative_to(ROOT).parts))
PLUGIN_FILES = [p for p in TREE_FILES if p.relative_to(ROOT).parts[0] in ("plugins", "contrib")]  # not the copies in build/
DUNDERS = {"__version__", "__future__", "__all__"}


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


def private_imports(source: str) -> list[str]:
    """Every ``from module import _name``, ``import module._name`` and ``alias._name`` where
    ``alias`` is an imported module of this project: a private name used outside the module that
    holds it. (The standard library's documented ``os._exit`` and the like are not ours.)"""
    found = []
    modules: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("unstable"):
                    continue
                modules.add((alias.asname or alias.name).split(".")[0])
                if any(p.startswith("_") and p not in DUNDERS for p in alias.name.split(".")):
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if not (node.level or module.startswith("unstable")):
                continue
            if any(p.startswith("_") and p not in DUNDERS for p in (node.module or "").split(".")):
                found.append(f"line {node.lineno}: from {module}")
            for alias in node.names:
                if alias.name.startswith("_") and alias.name not in DUNDERS:
                    found.append(f"line {node.lineno}: from {module} import {alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", TREE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_another_modules_private_name(path):
    assert private_imports(path.read_text()) == [], f"{path.relative_to(ROOT)} uses another module's private name"


def test_the_private_import_check_sees_each_form():
    code = (
        "from unstable_core.basemodel import _unpickle\n"
        "from .contracts import _Contract\n"
        "import unstable_hf._private\n"
        "import unstable_core\nx = unstable_core._LAZY\n"
        "from __future__ import annotations\n"
        "from unstable_core import __version__, build_component\n"
        "from unstable_core.basemodel import trusted\n"
        "y = self._cache\n"
    )
    assert [v.split(":")[0] for v in private_imports(code)] == ["line 1", "line 2", "line 3", "line 5"]


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugin_code_uses_only_the_public_api(path):
    assert violations(path.read_text()) == [], f"{path.relative_to(ROOT)} reaches into unstable_core's internals"


def test_the_check_sees_each_kind_of_private_import():
    code = (
        "from unstable_core.builtin.templates import TEMPLATES\n"
        "import unstable_core.runtime.registry\n"
        "from unstable_core.basemodel import _unpickle\n"
        "from unstable_core.testing import _ToyPlugin\n"
        "import unstable_core\nx = unstable_core._LAZY\n"
        "from unstable_core import EnvSpec, build_component\n"
        "from unstable_core.testing import toy_config\n"
    )
    assert [v.split(":")[0] for v in violations(code)] == ["line 1", "line 2", "line 3", "line 4", "line 6"]


def test_every_public_name_resolves_and_is_documented():
    import unstable_core

    api_doc = (ROOT / "docs" / "api.md").read_text()
    import unstable_core.executors

    for module in (unstable_core, unstable_core.executors):
        for name in module.__all__:
            assert getattr(module, name) is not None
            assert f"`{name}`" in api_doc or f"`{name}(" in api_doc, f"docs/api.md does not mention the public name {name}"


CONTRIB_ALGORITHM = ROOT / "contrib" / "unstable-kl-reinforce"
TOOLKIT = ("unstable_hf.training", "unstable_hf.options", "unstable_hf.testing")


def test_the_contrib_algorithm_imports_only_the_public_api_and_the_toolkit():
    allowed_roots = {"unstable_core", "unstable_kl_reinforce", "torch", "pydantic", "pytest", "random", "os", "typing"}
    for path in CONTRIB_ALGORITHM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                ok = name.split(".")[0] in allowed_roots or name in TOOLKIT
                assert ok, f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
        assert not violations(path.read_text()), path


def test_the_contrib_learner_is_small_and_is_the_one_the_docs_show():
    source = (CONTRIB_ALGORITHM / "unstable_kl_reinforce" / "learner.py").read_text()
    assert len(source.splitlines()) <= 60
    body = source.split('"""', 2)[2].strip()  # without the module docstring
    doc = (ROOT / "docs" / "writing-an-algorithm.md").read_text()
    block = doc.split("## A complete learner", 1)[1].split("```python\n", 1)[1].split("```", 1)[0].strip()
    assert block == body
