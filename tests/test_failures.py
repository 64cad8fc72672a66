"""Every way a run used to hang or die with a traceback: each ends with one clear message naming
the plugin, component or key (exit status 2 in the CLI), within seconds."""

import asyncio
import json
import threading

import pytest

import unstable_core
from unstable_core import (
    ComponentError,
    ConfigError,
    EnvSamplerSpec,
    EnvSpec,
    LearnerSpec,
    ModelSamplerSpec,
    PluginError,
    RunFailed,
    TrackerSpec,
    UnstableError,
    hookimpl,
)
from unstable_core.testing import TabularLearner, TabularOptions, toy_config, toy_plugin

DEADLINE_S = 60  # a run that has not ended by then hangs


def run_within_deadline(system, cfg, run_dir):
    """Run in a thread; fail (and stop the run) if it does not end within the deadline."""
    job = unstable_core.build(cfg, run_dir=run_dir, plugins=system)
    outcome = {}

    def target():
        try:
            outcome["result"] = job.start()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    if thread.is_alive():
        job.stop()
        thread.join(10)
        pytest.fail(f"the run did not stop within {DEADLINE_S} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


class Samplers:
    """Model samplers that break the contract in each way a user met."""

    @hookimpl
    def unstable_model_samplers(self):
        class Strings:
            def sample(self, env, anchor, n, registry, rng):
                return [anchor.uid] * n

        class Nothing:
            def sample(self, env, anchor, n, registry, rng):
                return []

        class Flaky:
            calls = 0

            def sample(self, env, anchor, n, registry, rng):
                Flaky.calls += 1
                if Flaky.calls == 50:
                    raise RuntimeError("sampler broke on its 50th call")
                return [anchor] * n

        return [ModelSamplerSpec(name=n, summary=n, factory=lambda o, c, cls=cls: cls())
                for n, cls in (("uid-strings", Strings), ("nothing", Nothing), ("flaky", Flaky))]

    @hookimpl
    def unstable_env_samplers(self):
        class Returns:
            def __init__(self, value):
                self.value = value

            def sample(self, envs, rng):
                return self.value

        return [EnvSamplerSpec(name=n, summary=n, factory=lambda o, c, v=v: Returns(v))
                for n, v in (("a-string", "PickBest-v0"), ("none", None), ("unknown-env", EnvSpec(env_id="Nope-v0")))]


@pytest.mark.parametrize("sampler,message", [
    ("uid-strings", "model_sampler 'uid-strings' from plugin 'samplers'.*expected a ModelRef"),
    ("nothing", "model_sampler 'nothing' from plugin 'samplers'.*expected a list of 1 ModelRef"),
    ("flaky", "model_sampler 'flaky' from plugin 'samplers'.*sample raised RuntimeError: sampler broke on its 50th call"),
])
def test_a_broken_model_sampler_stops_training_with_its_name(make_plugin_system, tmp_path, sampler, message):
    system = make_plugin_system(toy_plugin, ("samplers", Samplers()))
    cfg = toy_config(train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
                     model_sampler={"name": sampler}, training={"learning_steps": 50, "batch_size": 16})
    with pytest.raises(ComponentError, match=message):
        run_within_deadline(system, cfg, tmp_path / "r")


def test_fixed_sampler_without_opponents_stops_with_a_reason(make_plugin_system, tmp_path):
    cfg = toy_config(train_envs=[{"env_id": "PickBest-v0", "num_players": 2, "num_actors": 1}],
                     opponents=[], model_sampler={"name": "fixed"})
    with pytest.raises(ComponentError, match="model_sampler 'fixed'.*needs \\[\\[opponents\\]\\]"):
        run_within_deadline(make_plugin_system(toy_plugin), cfg, tmp_path / "r")


@pytest.mark.parametrize("sampler,message", [
    ("a-string", "env_sampler 'a-string'.*returned 'PickBest-v0'; expected one of the configured EnvSpecs"),
    ("none", "env_sampler 'none'.*returned None"),
    ("unknown-env", "env_sampler 'unknown-env'.*env 'Nope-v0', which the config does not list"),
])
def test_a_broken_env_sampler_stops_the_run_with_its_name(make_plugin_system, tmp_path, sampler, message):
    system = make_plugin_system(toy_plugin, ("samplers", Samplers()))
    with pytest.raises(ComponentError, match=message):
        run_within_deadline(system, toy_config(env_sampler={"name": sampler}), tmp_path / "r")


def raising_plugin(hook_name):
    class Plugin:
        pass

    def impl(ctx):
        raise RuntimeError(f"{hook_name} is broken")

    impl.__name__ = hook_name
    setattr(Plugin, hook_name, staticmethod(hookimpl(impl)))
    return Plugin()


@pytest.mark.parametrize("hook_name", ["unstable_game_end", "unstable_batch_end", "unstable_run_start", "unstable_run_end",
                                       "unstable_checkpoint_saved", "unstable_validation_end"])
def test_a_lifecycle_hook_that_raises_names_its_plugin(make_plugin_system, tmp_path, hook_name):
    system = make_plugin_system(toy_plugin, ("notifier", raising_plugin(hook_name)))
    with pytest.raises(ComponentError, match=f"plugin 'notifier' .*: hook {hook_name} raised RuntimeError: {hook_name} is broken"):
        run_within_deadline(system, toy_config(training={"learning_steps": 2, "batch_size": 8}), tmp_path / "r")
    # the run directory was still flushed
    assert (tmp_path / "r" / "registry.json").exists()


def test_a_validation_vote_that_is_not_a_bool_names_its_plugin(make_plugin_system, tmp_path):
    class Voter:
        @hookimpl
        def unstable_validation_start(self, ctx):
            return "no"

    system = make_plugin_system(toy_plugin, ("voter", Voter()))
    with pytest.raises(ComponentError, match="plugin 'voter'.*returned 'no'; expected True, False or None"):
        run_within_deadline(system, toy_config(), tmp_path / "r")


class Broken:
    @hookimpl
    def unstable_learners(self):
        class Fails(TabularLearner):
            def update(self, batch):
                raise ValueError("update exploded")

        def factory_raises(o, c):
            raise KeyError("no such weights")

        def factory_exits(o, c):
            raise SystemExit(3)

        return [
            LearnerSpec(name="update-raises", summary="u", config=TabularOptions, factory=lambda o, c: Fails(o)),
            LearnerSpec(name="factory-raises", summary="f", config=TabularOptions, factory=factory_raises),
            LearnerSpec(name="factory-exits", summary="e", config=TabularOptions, factory=factory_exits),
        ]

    @hookimpl
    def unstable_trackers(self):
        class LogRaises:
            def log(self, record):
                if record.type == "train":
                    raise OSError("disk full")

            def close(self):
                pass

        return [TrackerSpec(name="log-raises", summary="l", factory=lambda o, c: LogRaises())]


@pytest.mark.parametrize("overrides,error,message", [
    ({"learner": {"name": "update-raises"}}, ComponentError, "learner 'update-raises' from plugin 'broken'.*update raised ValueError: update exploded"),
    ({"learner": {"name": "factory-raises"}}, PluginError, "learner 'factory-raises' from plugin 'broken'.*could not be built: KeyError"),
    ({"learner": {"name": "factory-exits"}}, PluginError, "learner 'factory-exits' from plugin 'broken'.*could not be built: SystemExit"),
    ({"trackers": [{"name": "log-raises"}]}, ComponentError, "tracker 'log-raises' from plugin 'broken'.*log raised OSError: disk full"),
])
def test_a_component_that_raises_is_named(make_plugin_system, tmp_path, overrides, error, message):
    system = make_plugin_system(toy_plugin, ("broken", Broken()))
    with pytest.raises(error, match=message):
        run_within_deadline(system, toy_config(**overrides), tmp_path / "r")


def test_a_failed_start_does_not_block_the_rerun_that_fixes_it(make_plugin_system, tmp_path):
    """A run that failed before it played or saved anything (here: its learner cannot be built)
    leaves a run directory that the fixed config may use again; a run that played is refused."""
    system = make_plugin_system(toy_plugin, ("broken", Broken()))
    run_dir = tmp_path / "r"
    with pytest.raises(PluginError, match="could not be built"):
        run_within_deadline(system, toy_config(learner={"name": "factory-raises"}, trackers=[{"name": "jsonl"}]), run_dir)
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["status"] == "failed"
    fixed = toy_config(training={"learning_steps": 1, "batch_size": 8}, trackers=[{"name": "jsonl"}])
    run_within_deadline(system, fixed, run_dir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records].count("start") == 1 and records[-1]["status"] == "completed"
    with pytest.raises(UnstableError, match="already holds a run.*unstable run --resume"):
        run_within_deadline(system, fixed, run_dir)


def test_a_run_whose_every_game_fails_is_a_failed_run(make_plugin_system, tmp_path):
    cfg = {"name": "t", "env": {"name": "toy"}, "train_envs": [{"env_id": "PickBest-v0", "kwargs": {"no_such_kwarg": 1}}],
           "opponents": ["random-valid", "first-valid"], "model_sampler": {"name": "fixed"},
           "collection": {"tournament_games": 20}, "trackers": [{"name": "jsonl"}]}
    with pytest.raises(RunFailed, match="every game failed \\(20\\).*TypeError"):
        run_within_deadline(make_plugin_system(toy_plugin), cfg, tmp_path / "r")


def test_uids_that_look_like_count_names_keep_pair_counts_right(make_plugin_system, tmp_path):
    opponents = [{"uid": u, "model": "random-valid"} for u in ("games", "draws", "a|b")]
    cfg = {"name": "t", "train_envs": ["TicTacToe-v0-train"], "opponents": opponents, "model_sampler": {"name": "fixed"},
           "collection": {"tournament_games": 120}, "trackers": [{"name": "jsonl"}]}
    run_within_deadline(make_plugin_system(), cfg, tmp_path / "r")
    registry = json.loads((tmp_path / "r" / "registry.json").read_text())
    pairs = registry["pairs"]
    assert {(p["a"], p["b"]) for p in pairs} <= {("a|b", "draws"), ("a|b", "games"), ("draws", "games")}
    assert sum(p["games"] for p in pairs) == 120
    for p in pairs:
        assert p["games"] == p["wins_a"] + p["wins_b"] + p["draws"]
    assert sum(m["games"] for m in registry["models"]) == 240


def test_a_huge_action_is_cut_before_the_env_sees_it():
    from unstable_core import Completion, EnvSpec, GameSpec, ModelRef
    from unstable_core.runtime.game.runner import GameRunner
    from unstable_core.testing import PickBestGame, ToyProvider

    seen = []

    class Recording(PickBestGame):
        def step(self, action):
            seen.append(len(action))
            return super().step(action)

    class Provider(ToyProvider):
        def make(self, env):
            return Recording()

    class Huge:
        tokenizer = None

        async def generate(self, request):
            return Completion(text="x" * 100_000)

    template = unstable_core.build_component("template", "default")
    runner = GameRunner(Provider(), lambda n: template, lambda n: Huge(), max_action_chars=1000)
    seats = [ModelRef(uid="a"), ModelRef(uid="b")]
    result = asyncio.run(runner.play(GameSpec(game_idx=0, seed=0, env=EnvSpec(env_id="PickBest-v0"), seats=seats)))
    assert result.outcome == "finished" and seen == [1000]  # an invalid move, decided on 1,000 characters
    assert result.trajectories[0].turns[0].invalid


def test_run_directory_problems_are_one_line(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    (tmp_path / "file").write_text("x")
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "games").write_text("a file where the folder goes")
    for run_dir, message in [
        (tmp_path / "file" / "run", "Not a directory"),
        (str(tmp_path / "nul") + "\x00x", "null"),
        (tmp_path / ("x" * 300), "too long"),
        (occupied, "exists"),
    ]:
        with pytest.raises(UnstableError, match=message) as info:
            unstable_core.run(toy_config(), run_dir=run_dir, plugins=system)
        assert "\n" not in str(info.value)


def test_a_run_directory_that_holds_a_run_is_refused(make_plugin_system, tmp_path):
    system = make_plugin_system(toy_plugin)
    cfg = toy_config(training={"learning_steps": 1, "batch_size": 8})
    unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    before = (tmp_path / "r" / "metrics.jsonl").read_text()
    with pytest.raises(UnstableError, match="already holds a run"):
        unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == before


@pytest.mark.parametrize("change,message", [
    ({"collection": {"num_train_games": 10**9}}, "collection.num_train_games"),
    ({"train_envs": [{"env_id": "PickBest-v0", "num_players": 10**6}]}, "train_envs.0.num_players"),
    ({"train_envs": [{"env_id": "PickBest-v0", "weight": float("inf")}]}, "train_envs.0.weight"),
    ({"name": "../../escape"}, "name: string should match pattern"),
    ({"trackers": [{"name": "jsonl", "filename": "../../escape.jsonl"}]}, "trackers.0.filename"),
    ({"trackers": [{"name": "jsonl", "filename": "/tmp/escape.jsonl"}]}, "trackers.0.filename"),
])
def test_out_of_bounds_values_are_config_errors(make_plugin_system, tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        unstable_core.build(toy_config(**change), run_dir=tmp_path / "r", plugins=make_plugin_system(toy_plugin))


def test_deep_nesting_is_refused(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("name = 'x'\nv = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nest too deeply"):
        unstable_core.build(deep)
    with pytest.raises(ConfigError, match="nests 5000 levels deep"):
        unstable_core.build(toy_config(), overrides=[".".join(["a"] * 5000) + "=1"])
    with pytest.raises(ConfigError, match="nest too deeply"):
        unstable_core.build(toy_config(), overrides=["name=" + "[" * 5000 + "]" * 5000])


def test_a_hookimpl_taking_fewer_arguments_than_the_spec_is_valid(make_plugin_system):
    import click

    class Quiet:
        @hookimpl
        def unstable_register_commands(self):  # pluggy allows leaving `cli` out
            self.called = True

    plugin = Quiet()
    system = unstable_core.load_plugins(builtins=True, entry_points=False, extra=[("quiet", plugin)])
    assert system.records["quiet"].status == "active"
    for impl in system.pm.hook.unstable_register_commands.get_hookimpls():
        system.call_impl("unstable_register_commands", impl, cli=click.Group())
    assert plugin.called


# -- through the command line: exit status 2, one message, no traceback ---------------------------

PLUGIN_EXITS = "import sys\nsys.exit('plugin gave up')\n"
PLUGIN_BASE_EXCEPTION = "class Weird(BaseException):\n    pass\nraise Weird('odd')\n"
PLUGIN_HOOK_RAISES = """
from unstable_core import hookimpl
@hookimpl
def unstable_game_end(ctx):
    raise RuntimeError("game-end listener is broken")
"""


def install_fake(site, name, code):
    """A module plus a .dist-info folder declaring it as an `unstable` entry point."""
    (site / f"fake_{name}.py").write_text(code)
    dist = site / f"unstable_fake_{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: unstable-fake-{name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[unstable]\n{name} = fake_{name}\n")


TOURNAMENT = 'name = "t"\ntrain_envs = ["TicTacToe-v0-train"]\nopponents = ["random-valid", "greedy"]\n[model_sampler]\nname = "fixed"\n'


def test_a_plugin_whose_import_exits_is_listed_as_broken(cli, tmp_path):
    install_fake(tmp_path, "quitter", PLUGIN_EXITS)
    install_fake(tmp_path, "weird", PLUGIN_BASE_EXCEPTION)
    env = {"PYTHONPATH": str(tmp_path)}
    assert cli("--help", env=env).returncode == 0
    listing = cli("plugins", "list", "--json", env=env)
    assert listing.returncode == 0, listing.stderr
    plugins = {p["name"]: p for p in json.loads(listing.stdout)}
    assert plugins["quitter"]["status"] == "error" and "SystemExit: plugin gave up" in plugins["quitter"]["error"]
    assert plugins["weird"]["status"] == "error" and "Weird: odd" in plugins["weird"]["error"]


def test_a_raising_lifecycle_hook_of_an_unused_plugin_fails_the_run_naming_it(cli, tmp_path):
    install_fake(tmp_path, "listener", PLUGIN_HOOK_RAISES)
    config = tmp_path / "t.toml"
    config.write_text(TOURNAMENT)
    proc = cli("run", str(config), "--run-dir", str(tmp_path / "r"), env={"PYTHONPATH": str(tmp_path)}, timeout=DEADLINE_S)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "plugin 'listener' (unstable-fake-listener 1.0): hook unstable_game_end raised RuntimeError" in proc.stderr


@pytest.mark.parametrize("env_line,message", [
    ('train_envs = ["TicTacToe-v0-trian"]', "unknown TextArena env 'TicTacToe-v0-trian'. Did you mean 'TicTacToe-v0-train'?"),
    ('train_envs = [{ env_id = "TicTacToe-v0-train", num_players = 3 }]', "cannot be played with num_players = 3"),
    ('train_envs = [{ env_id = "TicTacToe-v0-train", kwargs = { size = 4 } }]', "does not take kwargs"),
])
def test_config_check_catches_bad_environments(cli, tmp_path, env_line, message):
    config = tmp_path / "t.toml"
    config.write_text(TOURNAMENT.replace('train_envs = ["TicTacToe-v0-train"]', env_line))
    for args in (("config", "check", str(config)), ("run", str(config), "--run-dir", str(tmp_path / "r"))):
        proc = cli(*args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()  # nothing was run


def test_config_check_catches_unknown_agents_and_model_options(cli, tmp_path):
    config = tmp_path / "t.toml"
    config.write_text(TOURNAMENT.replace('"greedy"]', '"gready", { uid = "x", model = "greedy", options = { temperature = 2 } }]'))
    proc = cli("config", "check", str(config))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "opponents.1: unknown scripted agent 'gready'. Did you mean 'greedy'?" in proc.stderr
    assert "opponents.2.options" in proc.stderr and "temperature" in proc.stderr


def test_an_unwritable_run_directory_is_one_line(cli, tmp_path):
    config = tmp_path / "t.toml"
    config.write_text(TOURNAMENT)
    (tmp_path / "file").write_text("")
    proc = cli("run", str(config), "--run-dir", str(tmp_path / "file" / "run"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: run directory")


def test_sigterm_stops_like_ctrl_c_with_everything_flushed(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    config = tmp_path / "long.toml"
    config.write_text(TOURNAMENT + "[collection]\ntournament_games = 10000000\n")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from unstable_core.cli import main; main()", "run", str(config), "--run-dir", str(run_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and (not metrics.exists() or metrics.stat().st_size < 10_000):
            time.sleep(0.05)  # waiting for the run to have started, not for timing
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "SIGTERM" in err
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert records[-1]["type"] == "end" and records[-1]["status"] == "interrupted"
    assert records[-2]["type"] == "ratings" and records[-3]["type"] == "summary"
    registry = json.loads((run_dir / "registry.json").read_text())
    assert sum(m["games"] for m in registry["models"]) == 2 * records[-3]["games"] == 2 * records[-1]["games"]


def _learner_plugin(update):
    """A plugin with learner ``odd``: the toy tabular learner whose ``update`` is replaced."""
    from unstable_core import LearnerSpec, hookimpl
    from unstable_core.testing import toy_plugin

    tabular = toy_plugin.unstable_learners()[0]

    def make(options, ctx):
        learner = tabular.factory(options, ctx)
        learner.update = lambda batch: update(learner, batch)
        return learner

    class Plugin:
        @hookimpl
        def unstable_learners(self):
            return [LearnerSpec(name="odd", summary="A learner that misbehaves", config=tabular.config, factory=make)]

    return Plugin()


def test_a_learner_reporting_nan_stops_the_run_naming_it_unless_allowed(make_plugin_system, tmp_path):
    import math

    import unstable_core
    from unstable_core import RunFailed
    from unstable_core.testing import toy_config, toy_plugin

    system = make_plugin_system(toy_plugin, ("odd-plugin", _learner_plugin(lambda learner, batch: {"loss": math.nan, "grad_norm": 1.0})))
    cfg = toy_config(learner={"name": "odd"}, training={"learning_steps": 3, "batch_size": 8})
    with pytest.raises(RunFailed, match=r"learner 'odd' from plugin 'odd-plugin' .*: update reported loss = nan"):
        unstable_core.run(cfg, run_dir=tmp_path / "a", plugins=system)
    allowed = unstable_core.run({**cfg, "training": {**cfg["training"], "allow_non_finite": True}}, run_dir=tmp_path / "b", plugins=system)
    assert allowed.status == "completed" and allowed.learner_steps == 3


def test_a_learner_that_calls_sys_exit_is_named_not_an_exit_status(make_plugin_system, tmp_path):
    import sys

    import unstable_core
    from unstable_core import ComponentError
    from unstable_core.testing import toy_config, toy_plugin

    system = make_plugin_system(toy_plugin, ("odd-plugin", _learner_plugin(lambda learner, batch: sys.exit(7))))
    with pytest.raises(ComponentError, match=r"learner 'odd' from plugin 'odd-plugin' .*: update raised SystemExit: 7"):
        unstable_core.run(toy_config(learner={"name": "odd"}, training={"learning_steps": 2, "batch_size": 8}), run_dir=tmp_path / "r",
                          plugins=system)


def test_stop_before_start_prevents_the_run(make_plugin_system, tmp_path):
    import unstable_core
    from unstable_core.testing import toy_config, toy_plugin

    job = unstable_core.build(toy_config(training={"learning_steps": 2}), run_dir=tmp_path / "r", plugins=make_plugin_system(toy_plugin))
    job.stop()
    result = job.start()
    assert result.status == "interrupted" and result.games_played == 0 and not (tmp_path / "r").exists()


def test_a_backend_that_never_answers_stops_the_run_within_its_timeout(make_plugin_system, tmp_path):
    """No hang on a silent backend: past collection.request_timeout_s the run stops, naming the
    backend and the model (scripted agents, which answer at once, need no bound)."""
    import asyncio
    import time

    import unstable_core
    from unstable_core import InferenceSpec, RunFailed, hookimpl
    from unstable_core.testing import toy_plugin

    class Silent:
        tokenizer = None

        async def generate(self, request):
            await asyncio.Event().wait()  # never set

        def load_checkpoint(self, checkpoint):
            return checkpoint.version

        def close(self):
            pass

    class Plugin:
        @hookimpl
        def unstable_inference_backends(self):
            return [InferenceSpec(name="silent", summary="Never answers", factory=lambda o, ctx: Silent(), serves_checkpoints=False)]

    system = make_plugin_system(toy_plugin, ("silent-plugin", Plugin()))
    cfg = {"name": "t", "seed": 0, "env": {"name": "toy"}, "train_envs": ["PickBest-v0"],
           "opponents": ["random-valid", {"uid": "mute", "model": "m", "backend": "silent"}], "model_sampler": {"name": "fixed"},
           "collection": {"tournament_games": 50, "num_train_games": 4, "request_timeout_s": 0.5}, "trackers": []}
    began = time.monotonic()
    with pytest.raises(RunFailed, match=r"inference 'silent' gave no answer for model 'mute' within collection.request_timeout_s = 0.5 s"):
        unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    assert time.monotonic() - began < 10


class FactoriesThatRaise:
    @hookimpl
    def unstable_model_samplers(self):
        def factory(options, ctx):
            raise KeyError("population")

        return [ModelSamplerSpec(name="factory-raises", summary="f", factory=factory)]


def test_config_check_builds_the_cheap_components_and_names_a_factory_that_raises(make_plugin_system):
    """A factory that raises passes the options check; `config check` builds samplers, raters,
    buffers and reward transforms once, so it is one line there, not at the run's start."""
    from unstable_core.config_check import factory_problems
    from unstable_core.runtime.plan import make_plan

    system = make_plugin_system(toy_plugin, ("factories", FactoriesThatRaise()))
    cfg = unstable_core.validate_config(toy_config(model_sampler={"name": "factory-raises"}))
    plan = make_plan(cfg, system, "", "c.toml")  # its options are fine
    problems = factory_problems(plan, system)
    assert len(problems) == 1
    assert problems[0].startswith("c.toml: model_sampler: model_sampler 'factory-raises' from plugin 'factories'")
    assert "could not be built: KeyError" in problems[0]
    assert factory_problems(make_plan(unstable_core.validate_config(toy_config()), system, "", "c.toml"), system) == []
