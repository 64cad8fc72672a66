"""Entry-point discovery with fake *.dist-info folders: nothing is installed."""

import json
import textwrap

import pytest

GOOD = '''
from unstable_core import hookimpl, EnvSamplerSpec
class S:
    def sample(self, envs, rng): return envs[0]
@hookimpl
def unstable_env_samplers():
    return [EnvSamplerSpec(name="first-env", summary="Always the first env", factory=lambda o, ctx: S())]
'''

BROKEN_IMPORT = "import no_such_module_xyz\n"

HOOK_RAISES = '''
from unstable_core import hookimpl
@hookimpl
def unstable_learners():
    raise RuntimeError("boom in hook")
'''

WRONG_TYPE = '''
from unstable_core import hookimpl
@hookimpl
def unstable_raters():
    return [{"name": "not-a-record"}]
'''

DUPLICATE = '''
from unstable_core import hookimpl, EnvSamplerSpec
@hookimpl
def unstable_env_samplers():
    return [EnvSamplerSpec(name="uniform", summary="Clashes with the built-in", factory=lambda o, ctx: None)]
'''

UNKNOWN_HOOK = '''
from unstable_core import hookimpl
@hookimpl
def unstable_no_such_hook():
    return 1
'''

PLUGINS = {
    "good": GOOD,
    "broken": BROKEN_IMPORT,
    "raises": HOOK_RAISES,
    "wrongtype": WRONG_TYPE,
    "dup": DUPLICATE,
    "offswitch": GOOD.replace("first-env", "second-env"),
    "unknownhook": UNKNOWN_HOOK,
}


@pytest.fixture
def site(tmp_path):
    for name, code in PLUGINS.items():
        mod = f"fakeplug_{name}"
        (tmp_path / f"{mod}.py").write_text(textwrap.dedent(code))
        dist = tmp_path / f"unstable_fake_{name}-1.{len(name)}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: unstable-fake-{name}\nVersion: 1.{len(name)}\n")
        (dist / "entry_points.txt").write_text(f"[unstable]\n{name} = {mod}\n")
    return tmp_path


def listing(cli, site, **env):
    proc = cli("plugins", "list", "--json", "--all", env={"PYTHONPATH": str(site), "UNSTABLE_DISABLE_PLUGINS": "offswitch", **env})
    assert proc.returncode == 0, proc.stderr
    return {p["name"]: p for p in json.loads(proc.stdout)}


def test_each_plugin_is_recorded_with_its_status(cli, site):
    plugins = listing(cli, site)
    assert plugins["good"]["status"] == "active"
    assert plugins["good"]["components"] == ["env_sampler:first-env"]
    assert plugins["good"]["package"] == "unstable-fake-good" and plugins["good"]["version"] == "1.4"
    assert plugins["good"]["hooks"] == ["unstable_env_samplers"]
    assert plugins["broken"]["status"] == "error" and "ModuleNotFoundError" in plugins["broken"]["error"]
    assert plugins["raises"]["status"] == "error" and "boom in hook" in plugins["raises"]["error"]
    assert plugins["wrongtype"]["status"] == "error" and "RaterSpec" in plugins["wrongtype"]["error"]
    dup = plugins["dup"]
    assert dup["status"] == "error"
    assert "unstable-core" in dup["error"] and "unstable-fake-dup" in dup["error"]
    assert plugins["offswitch"]["status"] == "disabled" and plugins["offswitch"]["components"] == []
    assert plugins["unknownhook"]["status"] == "error" and "unstable_no_such_hook" in plugins["unknownhook"]["error"]
    for p in plugins.values():
        assert set(p) == {"name", "package", "version", "status", "builtin", "components", "hooks", "error"}
    assert plugins["core.samplers"]["builtin"] is True
    # the built-in that the duplicate tried to replace is untouched
    assert "env_sampler:uniform" in plugins["core.samplers"]["components"]


def test_without_all_only_installed_plugins_are_listed(cli, site):
    proc = cli("plugins", "list", "--json", env={"PYTHONPATH": str(site)})
    names = {p["name"] for p in json.loads(proc.stdout)}
    assert "good" in names and not any(n.startswith("core.") for n in names)


def test_table_output_shows_errors_and_exits_zero(cli, site):
    proc = cli("plugins", "list", env={"PYTHONPATH": str(site), "COLUMNS": "250"})
    assert proc.returncode == 0
    assert "error" in proc.stdout and "active" in proc.stdout and "good" in proc.stdout


def test_load_switch_limits_entry_points(cli, site):
    plugins = listing(cli, site, UNSTABLE_LOAD_PLUGINS="good")
    assert plugins["good"]["status"] == "active"
    assert plugins["broken"]["status"] == "disabled"
    empty = listing(cli, site, UNSTABLE_LOAD_PLUGINS="")
    assert all(p["status"] == "disabled" for n, p in empty.items() if not p["builtin"])


def test_strict_mode_reraises(cli, site):
    proc = cli("plugins", "list", "--json", env={"PYTHONPATH": str(site), "UNSTABLE_STRICT_PLUGINS": "1", "UNSTABLE_LOAD_PLUGINS": "broken"})
    assert proc.returncode != 0
    assert "no_such_module_xyz" in proc.stderr


def test_trace_prints_hook_calls(cli, site):
    proc = cli("plugins", "list", "--json", env={"PYTHONPATH": str(site), "UNSTABLE_TRACE_PLUGINS": "1", "UNSTABLE_LOAD_PLUGINS": "good"})
    assert proc.returncode == 0
    assert "[unstable trace] unstable_env_samplers() -> [good]" in proc.stderr
    assert "[unstable trace] unstable_env_samplers ok" in proc.stderr


def test_working_plugin_component_usable_despite_broken_ones(cli, site):
    proc = cli("components", "show", "env_sampler", "first-env", "--json", env={"PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["package"] == "unstable-fake-good"


def test_missing_component_names_broken_plugins(cli, site):
    proc = cli("components", "show", "learner", "no-such-learner", env={"PYTHONPATH": str(site)})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "raises" in proc.stderr and "boom in hook" in proc.stderr


def test_an_unknown_name_in_unstable_load_plugins_is_one_line_not_silence(tmp_path):
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "unstable_core.cli", "plugins", "list"], capture_output=True, text=True,
                          env={**os.environ, "UNSTABLE_LOAD_PLUGINS": "trueskil"}, timeout=120)
    assert done.returncode == 2 and "UNSTABLE_LOAD_PLUGINS names 'trueskil', which no installed plugin is" in done.stderr
    assert "Did you mean 'trueskill'?" in done.stderr and "Traceback" not in done.stderr
