"""Every hook spec is documented in docs/ with its exact signature and called by a test."""

import inspect
from pathlib import Path

import click
import pytest

import unstable_core
from unstable_core import hookimpl, hookspecs
from unstable_core.components import KINDS
from unstable_core.testing import toy_config, toy_plugin

DOCS = Path(__file__).resolve().parent.parent / "docs" / "hooks.md"


def signature_line(name):
    fn = getattr(hookspecs, name)
    sig = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"{name}({params}) -> {sig.return_annotation}"


@pytest.mark.parametrize("name", hookspecs.all_hook_names())
def test_hook_is_documented_with_exact_signature(name):
    text = DOCS.read_text()
    assert f"### `{name}`" in text, f"docs/hooks.md has no section for {name}"
    assert signature_line(name) in text, f"docs/hooks.md does not show {signature_line(name)}"
    section = text.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]
    assert "When:" in section and "Example" in section


def test_every_hook_spec_is_called(make_plugin_system, tmp_path):
    """Run a real toy training run plus the CLI's command registration with a plugin that
    implements every hook and records which ones the framework called."""
    called = set()

    class Everything:
        pass

    plugin = Everything()
    for name in hookspecs.all_hook_names():
        params = list(inspect.signature(getattr(hookspecs, name)).parameters)

        def make(name=name, params=params):
            def impl(**kwargs):
                called.add(name)
                return [] if name in {k.hook for k in KINDS.values()} else None
            impl.__name__ = name
            # pluggy reads argument names from the signature
            sig = inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params])
            impl.__signature__ = sig
            return hookimpl(impl)

        setattr(plugin, name, make())

    system = make_plugin_system(toy_plugin, plugin)
    unstable_core.run(toy_config(training={"learning_steps": 2, "batch_size": 8, "eval_every": 1}), run_dir=tmp_path / "r", plugins=system)
    group = click.Group()
    for impl in system.pm.hook.unstable_register_commands.get_hookimpls():
        system.call_impl("unstable_register_commands", impl, cli=group)
    assert called == set(hookspecs.all_hook_names())
