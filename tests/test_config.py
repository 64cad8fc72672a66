import json
from pathlib import Path

import pytest

from unstable_core.config import load_config, validate_config
from unstable_core.config_check import resolve_components
from unstable_core.config_loading import apply_overrides
from unstable_core.errors import ConfigError

GOOD = """
name = "t"
train_envs = ["TicTacToe-v0-train"]
opponents = ["random-valid", "greedy"]
[model_sampler]
name = "fixed"
[collection]
tournament_games = 4
"""


def write(tmp_path, text, name="c.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_loads_and_defaults(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.train_envs[0].env_id == "TicTacToe-v0-train"
    assert [o.uid for o in cfg.opponents] == ["random-valid", "greedy"]
    assert cfg.opponents[0].ref().backend == "scripted"
    assert cfg.model_sampler.name == "fixed" and cfg.rater.name == "wins"
    assert cfg.evaluation_envs == cfg.train_envs


def test_overrides_parse_toml_values_and_index_lists(tmp_path):
    cfg = load_config(write(tmp_path, GOOD), ["collection.tournament_games=7", "train_envs.0=KuhnPoker-v0", "name=hello world",
        "model_sampler.exclude_anchor=false"])
    assert cfg.collection.tournament_games == 7
    assert cfg.train_envs[0].env_id == "KuhnPoker-v0"
    assert cfg.name == "hello world"
    assert cfg.model_sampler.options == {"exclude_anchor": False}


@pytest.mark.parametrize("override,fragment", [
    ("nokey", "expected KEY=VALUE"),
    ("train_envs.5.env_id=x", "not an index"),
    ("name.sub=1", "not a table"),
])
def test_bad_overrides(tmp_path, override, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(write(tmp_path, GOOD), [override])


def test_error_names_file_key_expected_and_found(tmp_path):
    p = write(tmp_path, GOOD + "\n[training]\nbatch_size = \"lots\"\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and "training.batch_size" in msg and "integer" in msg and "'lots'" in msg


def test_unknown_key_suggests(tmp_path):
    p = write(tmp_path, GOOD.replace("[collection]", "[collection]\ntournament_gams = 3"))
    with pytest.raises(ConfigError, match="collection.tournament_gams: unknown option"):
        load_config(p)


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "name = ["))
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(tmp_path / "bin.toml")


def test_plugin_option_typo_is_caught_before_work(tmp_path, make_plugin_system):
    cfg = load_config(write(tmp_path, GOOD + "\n[buffer]\nname = \"step\"\ncapacty = 5\n"))
    with pytest.raises(ConfigError) as e:
        resolve_components(cfg, make_plugin_system(), "c.toml")
    assert "buffer.capacty: unknown option of buffer 'step'; did you mean 'capacity'?" in str(e.value)


def test_unknown_component_suggests_closest(tmp_path, make_plugin_system):
    cfg = load_config(write(tmp_path, GOOD.replace('name = "fixed"', 'name = "fixd"')))
    with pytest.raises(ConfigError) as e:
        resolve_components(cfg, make_plugin_system(), "c.toml")
    assert "Did you mean 'fixed'?" in str(e.value) and "mirror" in str(e.value)


def test_transform_in_wrong_stage(tmp_path, make_plugin_system):
    cfg = load_config(write(tmp_path, GOOD + '\n[reward]\nfinal = [{name = "normalize"}]\n'))
    with pytest.raises(ConfigError, match="is a sampling transform, not a final one"):
        resolve_components(cfg, make_plugin_system(), "c.toml")


def test_structural_rules():
    with pytest.raises(ConfigError, match="train_envs or eval_envs"):
        validate_config({"opponents": ["greedy"]})
    with pytest.raises(ConfigError, match=r"needs a \[model\]"):
        validate_config({"train_envs": ["TicTacToe-v0"], "learner": {"name": "x"}})
    with pytest.raises(ConfigError, match="listed twice"):
        validate_config({"train_envs": ["TicTacToe-v0"], "opponents": ["greedy", "greedy"]})
    with pytest.raises(ConfigError, match="collection.eval_mixtures needs collection.eval_policy_metrics"):
        validate_config({"train_envs": ["TicTacToe-v0"], "opponents": ["greedy"], "collection": {"eval_mixtures": ["uniform"]}})
    with pytest.raises(ConfigError, match="collection.eval_mixtures"):
        validate_config({"train_envs": ["TicTacToe-v0"], "opponents": ["greedy"],
                         "collection": {"eval_policy_metrics": True, "eval_mixtures": ["average"]}})


def test_apply_overrides_does_not_mutate():
    data = {"a": {"b": 1}}
    out = apply_overrides(data, ["a.b=2", "a.c=[1, 2]"])
    assert data == {"a": {"b": 1}} and out == {"a": {"b": 2, "c": [1, 2]}}


def test_schema_includes_plugin_options(cli):
    proc = cli("config", "schema")
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    buffers = {v["title"]: v for v in schema["properties"]["buffer"]["oneOf"]}
    assert "capacity" in buffers["buffer:step"]["properties"]
    finals = {v["title"] for v in schema["properties"]["reward"]["properties"]["final"]["items"]["oneOf"]}
    assert "reward_transform:role-advantage" in finals and "reward_transform:normalize" not in finals
    # the schema validates a real example
    import tomllib
    from pathlib import Path

    import jsonschema

    data = tomllib.loads(Path("examples/tournament.toml").read_text())
    jsonschema.validate(data, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**data, "buffer": {"name": "step", "capacty": 3}}, schema)


def test_config_check_cli(cli, tmp_path):
    ok = cli("config", "check", "examples/tournament.toml")
    assert ok.returncode == 0 and "ok" in ok.stdout
    bad = write(tmp_path, GOOD + "\n[training]\nbatch_size = -3\n")
    proc = cli("config", "check", str(bad))
    assert proc.returncode == 2 and "training.batch_size" in proc.stderr and "Traceback" not in proc.stderr
    for override, key, fragment in (('reward.step=[{name="reward-for-format",exact="[oops"}]', "reward.step.0.exact",
                                     "not a regular expression"),
                                    ('reward.sampling=[{name="scale-negative",scale=2}]', "reward.sampling.0.scale",
                                     "less than or equal to 1")):
        proc = cli("config", "check", "examples/kuhn-tiny.toml", "--set", override)
        assert proc.returncode == 2 and f"{key}: " in proc.stderr and fragment in proc.stderr and "Traceback" not in proc.stderr


def test_a_component_checks_its_options_against_the_rest_of_the_run(tmp_path, make_plugin_system):
    """``check_run(options, components)``: a component sees every chosen component's options; a
    ValueError is the problem's own message, under the component's key."""
    from unstable_core import BufferSpec, hookimpl
    from unstable_core.builtin.buffers import BufferOptions, StepBuffer, buffer_factory
    from unstable_core.config_check import check_run

    seen = {}

    def check(options, components):
        seen.update(components)
        if options.capacity < 10:
            raise ValueError(f"capacity {options.capacity} is below what model_sampler needs")

    class Picky:
        @hookimpl
        def unstable_buffers(self):
            return [BufferSpec(name="picky", summary="Picky", config=BufferOptions, factory=buffer_factory(StepBuffer), check_run=check)]

    system = make_plugin_system(Picky())
    cfg = load_config(write(tmp_path, GOOD + '\n[buffer]\nname = "picky"\ncapacity = 5\n'))
    with pytest.raises(ConfigError) as e:
        check_run(cfg, system, "c.toml")
    assert "c.toml: buffer: capacity 5 is below what model_sampler needs" in str(e.value)
    assert {"buffer", "model_sampler", "env"} <= set(seen) and seen["buffer"].capacity == 5
    check_run(load_config(write(tmp_path, GOOD + '\n[buffer]\nname = "picky"\ncapacity = 50\n')), system, "c.toml")


def test_a_trained_model_needs_a_backend_that_loads_checkpoints(make_plugin_system):
    """A backend with ``serves_checkpoints = False`` (scripted agents, a remote API) may serve
    opponents, not the model a learner trains: refused before the run, naming the backend."""
    from unstable_core.config_check import check_run
    from unstable_core.testing import toy_config, toy_plugin

    system = make_plugin_system(toy_plugin)
    cfg = validate_config(toy_config(model={"model": "random-valid", "backend": "scripted"}))
    with pytest.raises(ConfigError, match=r"c\.toml: model: backend 'scripted' serves fixed models only"):
        check_run(cfg, system, "c.toml")
    tournament = toy_config(model={"model": "random-valid", "backend": "scripted"}, learner=None, opponents=["first-valid"])
    check_run(validate_config(tournament), system, "c.toml")  # no learner: served as it is
    check_run(validate_config(toy_config()), system, "c.toml")


@pytest.mark.parametrize("override,key,found", [
    ("seed=true", "seed", "True, a boolean"),
    ("collection.num_train_games=true", "collection.num_train_games", "True, a boolean"),
    ('collection.eval_policy_metrics="yes"', "collection.eval_policy_metrics", "'yes', a string"),
    ("collection.eval_policy_metrics=1", "collection.eval_policy_metrics", "1, an integer"),
    ('inference.trust_remote_code="yes"', "inference.trust_remote_code", "'yes', a string"),
    ('inference.temperature="1"', "inference.temperature", "'1', a string"),
    ("training.learning_steps=8.0", "training.learning_steps", "8.0, a number"),
])
def test_config_values_are_never_coerced(cli, override, key, found):
    """TOML gives every value its type: a string is no boolean, a boolean no integer, a float no
    integer; one line naming the key and what was found, exit 2 (plugin options alike)."""
    proc = cli("config", "check", "examples/kuhn-tiny.toml", "--set", override)
    assert proc.returncode == 2 and f"{key}: " in proc.stderr and found in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_more_actors_than_players_is_refused_naming_the_env(cli):
    proc = cli("config", "check", "examples/kuhn-tiny.toml", "--set", "train_envs.0.num_actors=3")
    assert proc.returncode == 2 and "train_envs.0: num_actors = 3 is more than the game's num_players = 2" in proc.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_watch_refuses_a_refresh_that_is_no_number_of_seconds(cli, tmp_path, value):
    proc = cli("watch", str(tmp_path), "--refresh", value, "--once")
    assert proc.returncode == 2 and "--refresh" in proc.stderr and "Traceback" not in proc.stderr


def test_a_model_uid_that_a_checkpoint_would_take_is_refused(cli):
    proc = cli("config", "check", "examples/tournament.toml", "--set", 'opponents=["random-valid", {uid="ckpt-1", model="greedy"}]')
    assert proc.returncode == 2 and "opponents.1.uid 'ckpt-1' is the name the learner's checkpoints take" in proc.stderr


def test_a_tournament_past_a_billion_games_and_an_empty_run_dir_are_refused(cli):
    proc = cli("config", "check", "examples/tournament.toml", "--set", "collection.tournament_games=1000000000000000")
    assert proc.returncode == 2 and "collection.tournament_games: input should be less than or equal to 1000000000" in proc.stderr
    proc = cli("run", "examples/tournament.toml", "--run-dir", "")
    assert proc.returncode == 2 and "run directory '': give a path" in proc.stderr


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_every_example_config_passes_the_check(example, tmp_path):
    """Each shipped example is a config a user can run as it is (where its plugins are installed)."""
    import tomllib

    import unstable_core
    from unstable_core import UnknownComponentError

    raw = tomllib.loads((EXAMPLES / example).read_text())
    # a GPU recipe names device = "cuda", refused on a machine without one (its own test): checked on the CPU
    cpu = [f"{section}.device=cpu" for section in ("learner", "inference")
           if str((raw.get(section) or {}).get("device", "")).startswith("cuda")]
    try:
        unstable_core.build(EXAMPLES / example, run_dir=tmp_path / "run", overrides=cpu)
    except UnknownComponentError as exc:
        pytest.skip(f"a plugin it needs is not installed: {exc}")


def test_thousands_of_problems_are_twenty_lines_and_a_count(cli, tmp_path):
    opponents = ", ".join(f'"nope-{i}"' for i in range(3000))
    path = tmp_path / "many.toml"
    path.write_text(f'train_envs = ["TicTacToe-v0-train"]\nopponents = [{opponents}]\n')
    out = cli("config", "check", str(path))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 21 and lines[-1] == "... and 2980 more problems", lines[-3:]
    assert "opponents.0: unknown scripted agent 'nope-0'" in lines[0]
    path.write_text('train_envs = ["TicTacToe-v0-train"]\nopponents = [' + ", ".join(["1"] * 500) + "]\n")
    out = cli("config", "check", str(path))
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1] == "... and 480 more problems"


def test_a_plugin_whose_options_json_schema_cannot_express_is_refused_and_the_schema_stays_whole(make_plugin_system):
    """Refused when it loads (``tests/test_plugin_options.py``): the schema describes the rest."""
    from collections.abc import Callable

    from pydantic import Field

    from unstable_core import Options, RaterSpec, hookimpl
    from unstable_core.config_schema import config_json_schema

    class CallableOptions(Options):
        score: Callable[[float], float] = Field(default=abs, description="How a result becomes a score.")

    class CallableRater:
        @hookimpl
        def unstable_raters(self):
            return [RaterSpec(name="callable-rater", summary="Options with a Callable", config=CallableOptions,
                              factory=lambda o, ctx: None)]

    system = make_plugin_system(("callable", CallableRater()), strict=False)
    assert system.records["callable"].status == "error"
    assert "option 'score' (CallableOptions.score) cannot be written as JSON" in (system.records["callable"].error or "")
    schema = config_json_schema(system)
    variants = {v["title"]: v for v in schema["properties"]["rater"]["oneOf"]}
    assert "rater:callable-rater" not in variants
    assert "rater:wins" in variants and schema["properties"]["buffer"]["oneOf"]  # the rest as before
