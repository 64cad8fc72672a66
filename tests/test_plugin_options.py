"""A plugin whose options model holds a field that cannot be written as JSON (a callable, an
object) is refused when it loads, in one line naming the plugin, the component and the field: a
run's plan, its config.json and ``config schema`` all write options as JSON."""

from __future__ import annotations

import json

import pytest

from unstable_core import PluginError

PLUGIN = """
from typing import Callable
from pydantic import BaseModel, ConfigDict
from unstable_core import hookimpl, ModelSamplerSpec, InferenceSpec
from unstable_core.builtin.samplers import FixedSampler

class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight: float = 1.0
    score: {annotation} = {default}

@hookimpl
def unstable_model_samplers():
    return [ModelSamplerSpec(name="scored", summary="s", config=Options, factory=lambda o, ctx: None)]
"""

TOURNAMENT = ('name = "t"\ntrain_envs = ["TicTacToe-v0-train"]\nopponents = ["random-valid", "greedy"]\n'
              '[model_sampler]\nname = "scored"\n')


def install_fake(site, name, code):
    (site / f"fake_{name}.py").write_text(code)
    dist = site / f"unstable_fake_{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: unstable-fake-{name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[unstable]\n{name} = fake_{name}\n")


@pytest.mark.parametrize("annotation,default", [("Callable[[float], float]", "abs"), ("object", "object()")])
def test_an_option_that_is_no_json_value_is_refused_at_plugin_load(cli, tmp_path, annotation, default):
    install_fake(tmp_path, "scorer", PLUGIN.format(annotation=annotation, default=default))
    env = {"PYTHONPATH": str(tmp_path)}
    config = tmp_path / "t.toml"
    config.write_text(TOURNAMENT)
    for args in (("config", "check", str(config)), ("run", str(config), "--run-dir", str(tmp_path / "r"))):
        proc = cli(*args, env=env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert "scorer (unstable-fake-scorer)" in lines[0]
        assert "model_sampler 'scored': option 'score' (Options.score) cannot be written as JSON" in lines[0]
    listing = json.loads(cli("plugins", "list", "--json", env=env).stdout)
    record = next(p for p in listing if p["name"] == "scorer")
    assert record["status"] == "error" and "option 'score'" in record["error"]


def test_json_options_load(make_plugin_system):
    """The same plugin with a JSON-able option loads and offers its component."""
    namespace: dict = {}
    exec(PLUGIN.format(annotation="float", default="0.5"), namespace)  # noqa: S102 - the test's own plugin text
    plugin = type("Plugin", (), {"unstable_model_samplers": staticmethod(namespace["unstable_model_samplers"])})()
    system = make_plugin_system(("scorer", plugin))
    assert system.get("model_sampler", "scored").name == "scored"


def test_a_callable_option_fails_a_strict_load(make_plugin_system):
    namespace: dict = {}
    exec(PLUGIN.format(annotation="Callable[[float], float]", default="abs"), namespace)  # noqa: S102
    plugin = type("Plugin", (), {"unstable_model_samplers": staticmethod(namespace["unstable_model_samplers"])})()
    with pytest.raises(PluginError, match=r"option 'score' \(Options.score\)"):
        make_plugin_system(("scorer", plugin))
