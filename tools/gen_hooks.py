"""Write docs/hooks.md from unstable_core/hookspecs.py: `python tools/gen_hooks.py`.

tests/test_hooks.py checks that every hook has a section with its exact signature."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

from unstable_core import hookspecs
from unstable_core.components import KINDS

DOCS = Path(__file__).resolve().parent.parent / "docs"

HEADER = """# Hook reference

Generated from `unstable_core/hookspecs.py` by `python tools/gen_hooks.py`; do not edit by hand.

Implement any hook with the `hookimpl` marker in a module (or object) that your distribution
exposes as an entry point of group `unstable` (see [writing-a-plugin.md](writing-a-plugin.md)):

```python
from unstable_core import hookimpl
```

There are three families:

* **Registration hooks** (`unstable_envs`, `unstable_learners`, ...) return lists of typed spec
  records. They are called once per plugin when the catalog is collected, one plugin at a time,
  so one broken plugin is recorded with status `error` and never breaks the others.
* **Lifecycle hooks** are called by the running loop with one pydantic context object whose
  fields may grow in later versions (new fields never break old plugins).
* **`unstable_register_commands`** adds subcommands to the `unstable` CLI.

A component object may also receive the lifecycle events of the role it runs in by calling
`ctx.subscribe(self)` in its factory (see `BuildContext.subscribe`): the league role sends
`unstable_game_end` and `unstable_checkpoint_saved`. Every other lifecycle hook runs in the
driver only. A lifecycle hook that raises stops the run with a message naming its plugin.

| kind | registration hook | record |
|---|---|---|
"""


def signature(name: str) -> str:
    sig = inspect.signature(getattr(hookspecs, name))
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"{name}({params}) -> {sig.return_annotation}"


def section(name: str) -> str:
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    body, _, example = doc.partition("Example::")
    lines = [f"### `{name}`", "", "```python", signature(name), "```", "", "When: " + " ".join(body.split()), ""]
    if example.strip():
        lines += ["Example:", "", "```python", textwrap.dedent(example).strip("\n"), "```", ""]
    return "\n".join(lines)


def main(out_dir: Path = DOCS) -> None:
    """Write the page into ``out_dir`` (default: docs/)."""
    registration = [k.hook for k in KINDS.values()]
    lifecycle = [n for n in hookspecs.all_hook_names() if n not in registration and n != "unstable_register_commands"]
    out = [HEADER.rstrip("\n")]
    out += [f"| `{k}` | `{kind.hook}` | `{kind.spec.__name__}` |" for k, kind in KINDS.items()]
    out += ["", "## Registration hooks", ""] + [section(n) for n in registration]
    out += ["## Lifecycle hooks", ""] + [section(n) for n in lifecycle]
    out += ["## CLI", "", section("unstable_register_commands")]
    (out_dir / "hooks.md").write_text("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main()
