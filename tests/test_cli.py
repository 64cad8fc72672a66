import json
import textwrap


def test_help_lists_commands(cli):
    proc = cli("--help")
    assert proc.returncode == 0
    for cmd in ("run", "plugins", "components", "config", "envs"):
        assert cmd in proc.stdout


def test_components_list_json_and_kind_filter(cli):
    proc = cli("components", "list", "--json")
    rows = json.loads(proc.stdout)
    keys = {(r["kind"], r["name"]) for r in rows}
    for k in [("env", "textarena"), ("model_sampler", "lagged"), ("reward_transform", "normalize-by-env"),
              ("buffer", "episode"), ("inference", "scripted"), ("executor", "local"), ("tracker", "console"),
              ("template", "qwen3-zs"), ("rater", "wins"), ("env_sampler", "uniform")]:
        assert k in keys
    only = json.loads(cli("components", "list", "--kind", "buffer", "--json").stdout)
    assert {r["name"] for r in only} >= {"step", "episode"} and {r["kind"] for r in only} == {"buffer"}
    bad = cli("components", "list", "--kind", "nope")
    assert bad.returncode == 2 and "kinds are" in bad.stderr


def test_components_show_options(cli):
    proc = cli("components", "show", "reward_transform", "role-advantage", "--json")
    data = json.loads(proc.stdout)
    opts = {o["name"]: o for o in data["options"]}
    assert opts["tau"]["type"] == "float" and opts["tau"]["default"] == 0.02 and opts["tau"]["description"]
    table = cli("components", "show", "buffer", "step", env={"COLUMNS": "200"})
    assert "capacity" in table.stdout and "1024" in table.stdout
    # option text is printed as written, not read as rich markup (which would drop "[a-z]" and "[bet]")
    fmt = cli("components", "show", "reward_transform", "reward-for-format", env={"COLUMNS": "250"})
    assert "'\\\\boxed\\{\\[[a-z]+\\]\\}'" in fmt.stdout
    missing = cli("components", "show", "buffer", "stepp")
    assert missing.returncode == 2 and "Did you mean 'step'" in missing.stderr and "Traceback" not in missing.stderr


def test_envs_list(cli):
    out = cli("envs", "list").stdout.split()
    assert "TicTacToe-v0" in out and "KuhnPoker-v0-train" in out


def test_run_bad_input_exit_2(cli, tmp_path):
    for args in (["run", str(tmp_path / "missing.toml")], ["run", "examples/tournament.toml", "--set", "collection=["]):
        proc = cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "error:" in proc.stderr
    bad_agent = tmp_path / "b.toml"
    bad_agent.write_text('train_envs = ["TicTacToe-v0"]\nopponents = ["gredy"]\n')
    proc = cli("run", str(bad_agent), "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 2 and "unknown scripted agent 'gredy'" in proc.stderr
    proc = cli("frobnicate")
    assert proc.returncode == 2


def test_plugin_adds_cli_command(cli, tmp_path):
    (tmp_path / "hello_plugin.py").write_text(textwrap.dedent('''
        import click
        from unstable_core import hookimpl

        @hookimpl
        def unstable_register_commands(cli):
            @cli.command()
            @click.argument("who")
            def hello(who):
                "Say hello."
                click.echo(f"hello {who}")
    '''))
    dist = tmp_path / "unstable_hello-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: unstable-hello\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[unstable]\nhello = hello_plugin\n")
    proc = cli("hello", "world", env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0 and proc.stdout.strip() == "hello world"
    listed = json.loads(cli("plugins", "list", "--json", env={"PYTHONPATH": str(tmp_path)}).stdout)
    assert any(p["name"] == "hello" and "unstable_register_commands" in p["hooks"] for p in listed)


def test_files_the_commands_cannot_read_or_write_are_one_line(cli, tmp_path):
    run = tmp_path / "run"
    assert cli("run", "examples/tournament.toml", "--run-dir", str(run), "--set", "collection.tournament_games=20").returncode == 0
    cases = [
        (["plot", str(run), "--out", "/proc/x.png"], "cannot write /proc/x.png"),
        (["plot", str(run), "--out", str(tmp_path / "x.nope")], "cannot draw a .nope file; use one of:"),
        (["config", "check", "a" * 300 + ".toml"], "File name too long"),
    ]
    for args, message in cases:
        out = cli(*args)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    assert cli("plot", str(run), "--out", str(tmp_path / "x.svg")).returncode == 0


def test_watch_skips_what_is_no_record_and_names_a_metrics_path_it_cannot_read(cli, tmp_path):
    run = tmp_path / "run"
    assert cli("run", "examples/tournament.toml", "--run-dir", str(run), "--set", "collection.tournament_games=20").returncode == 0
    metrics = run / "metrics.jsonl"
    good = metrics.read_bytes()
    metrics.write_bytes(good + b'[1, 2]\n\x00\xff\n{"type": "summary", "time": "x"}\n')
    out = cli("watch", str(run), "--once")
    assert out.returncode == 0 and "Traceback" not in out.stderr and "completed" in out.stdout, out.stderr
    metrics.unlink()
    metrics.mkdir()
    out = cli("watch", str(run), "--once")
    assert out.returncode == 2 and "metrics.jsonl: Is a directory" in out.stderr and "Traceback" not in out.stderr


def test_catalogs_read_whole_at_80_columns(cli):
    """At 80 columns no line is wider, and every plugin and component name is printed whole."""
    import re

    env = {"COLUMNS": "80"}
    components = json.loads(cli("components", "list", "--json").stdout)
    plugins = json.loads(cli("plugins", "list", "--all", "--json").stdout)
    renders = {args: cli(*args, env=env) for args in [
        ("plugins", "list", "--all"), ("plugins", "list", "--all", "--long"), ("components", "list"),
        ("components", "show", "reward_transform", "group-baseline"),
    ]}
    for args, done in renders.items():
        assert done.returncode == 0, done.stderr
        wide = [line for line in done.stdout.splitlines() if len(line) > 80]
        assert not wide, (args, wide)
    def whole(name, text):
        return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None
    for p in plugins:
        for args in (("plugins", "list", "--all"), ("plugins", "list", "--all", "--long")):
            assert whole(p["name"], renders[args].stdout), (args, p["name"])
        for component in p["components"]:
            kind, name = component.split(":")
            assert whole(kind + ":", renders[("plugins", "list", "--all")].stdout), component
            assert whole(name, renders[("plugins", "list", "--all")].stdout), component
    for c in components:
        assert whole(c["name"], renders[("components", "list")].stdout) and whole(c["plugin"], renders[("components", "list")].stdout)
    assert "'mean' | 'leave-one-out'" in renders[("components", "show", "reward_transform", "group-baseline")].stdout


def test_every_command_has_a_whole_summary_and_an_example(cli):
    top = cli("--help", env={"COLUMNS": "80"}).stdout
    summaries = top.split("Commands:")[1].strip().splitlines()
    assert summaries and not [s for s in summaries if s.rstrip().endswith("...")], summaries
    for args in (["run"], ["watch"], ["plot"], ["config", "check"], ["config", "schema"], ["plugins", "list"],
                 ["components", "list"], ["components", "show"], ["envs", "list"]):
        done = cli(*args, "--help", env={"COLUMNS": "80"})
        assert done.returncode == 0 and "Example: unstable " + args[0] in done.stdout, (args, done.stdout)



def test_config_check_warns_when_evaluations_fall_between_checkpoints():
    import unstable_core
    from unstable_core.config_check import config_warnings
    from unstable_core.testing import toy_config

    def warnings(**training):
        return config_warnings(unstable_core.validate_config(toy_config(training=training)))

    (line,) = warnings(eval_every=8, save_every=5)
    assert line.startswith("training.eval_every = 8 is not a multiple of training.save_every = 5") and "(at step 8: ckpt-5)" in line
    assert "(at step 3: base)" in warnings(eval_every=3, save_every=5)[0]
    assert warnings(eval_every=10, save_every=5) == [] and warnings(eval_every=0, save_every=5) == []


def test_off_a_terminal_the_last_evaluation_and_the_end_print_once(tmp_path):
    """Piped (`unstable run ... 2>&1 | cat`), the console tracker's plain lines already hold each
    evaluation and the run's last line: the command does not print them again on the same stream.
    With stdout apart from stderr, stdout still gets the last evaluation."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "unstable_core.cli", "run", "examples/tournament.toml",
               "--set", "collection.tournament_games=60"]
    merged = subprocess.run([*command, "--run-dir", str(tmp_path / "a")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=120)
    assert merged.returncode == 0, merged.stdout
    lines = merged.stdout.splitlines()
    evals = [line for line in lines if line.startswith("eval step")]
    assert evals and len(evals) == len(set(evals)), merged.stdout
    assert sum("completed" in line for line in lines) == 1, merged.stdout
    apart = subprocess.run([*command, "--run-dir", str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
    assert apart.returncode == 0, apart.stderr
    on_stdout = [line for line in apart.stdout.splitlines() if line.startswith("eval step")]
    on_stderr = [line for line in apart.stderr.splitlines() if line.startswith("eval step")]
    assert on_stdout and sorted(on_stdout) == sorted(on_stderr)  # one evaluation step: the same lines, once each
    assert sum("completed" in line for line in apart.stderr.splitlines()) == 1
