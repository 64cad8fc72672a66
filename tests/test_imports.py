"""The core, `unstable --help` and `unstable plugins list` import nothing heavy."""

import json
import subprocess
import sys

HEAVY = ["torch", "ray", "vllm", "textarena", "transformers"]

PROBE = """
import sys, json, io, contextlib
args = sys.argv[1:]
buf = io.StringIO()
if args:
    from unstable_core.cli import main
    with contextlib.redirect_stdout(buf):
        try:
            main(args)
        except SystemExit as e:
            assert not e.code, e.code
else:
    import unstable_core
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in %r)))
""".replace("%r", repr(HEAVY))


def heavy_modules(*args):
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_core_is_light():
    assert heavy_modules() == []


def test_help_is_light():
    assert heavy_modules("--help") == []


def test_plugins_list_is_light():
    assert heavy_modules("plugins", "list", "--all") == []


def test_public_names_resolve():
    import unstable_core

    for name in unstable_core.__all__:
        assert getattr(unstable_core, name) is not None
