"""`unstable plot`: one run or several (seeds) as their mean and range."""

import json
import shutil
from pathlib import Path

import pytest

from unstable_core.plotting import curves, plot_runs, spread

DATA = Path(__file__).parent / "data"


def write_run(directory: Path, win_rates: dict[int, float], invalid: float = 0.01, losses=(0.5, 0.25)) -> Path:
    directory.mkdir(parents=True)
    records = [{"type": "start", "step": 0, "time": 0.0}]
    records += [{"type": "eval", "step": s, "env_id": "KuhnPoker-v0-train", "model": f"ckpt-{s}", "opponent": "random-valid",
                 "games": 400, "win_rate": w, "draw_rate": 0.0, "loss_rate": 1 - w, "invalid_rate": invalid} for s, w in win_rates.items()]
    records += [{"type": "train", "step": i + 1, "loss": loss, "grad_norm": 2 * loss} for i, loss in enumerate(losses)]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return directory


def test_spread_is_mean_and_range_at_the_steps_every_run_reached():
    s = spread([{0: 0.5, 10: 0.6, 20: 0.7}, {0: 0.4, 10: 0.8}, {0: 0.6, 10: 0.7, 20: 0.9}])
    assert s.steps == [0, 10] and s.runs == 3
    assert s.mean == pytest.approx([0.5, 0.7]) and s.low == [0.4, 0.6] and s.high == [0.6, 0.8]


def test_curves_of_training_runs_and_of_a_tournament(tmp_path):
    from unstable_core.plotting import read_metrics

    a = write_run(tmp_path / "a", {0: 0.5, 20: 0.7}, invalid=0.02, losses=(1.0, 0.5))
    b = write_run(tmp_path / "b", {0: 0.6, 20: 0.6}, invalid=0.04, losses=(3.0, 1.5))
    drawn = curves([read_metrics(a), read_metrics(b)])
    (label,) = drawn["win rate"]
    assert label == "KuhnPoker-v0-train vs random-valid"  # a training run: one curve across checkpoints
    win = drawn["win rate"][label]
    assert (win.steps, win.mean, win.low, win.high) == ([0, 20], pytest.approx([0.55, 0.65]), [0.5, 0.6], [0.6, 0.7])
    assert drawn["invalid-move rate"][label].mean == pytest.approx([0.03, 0.03])
    assert drawn["loss"]["loss"].mean == pytest.approx([2.0, 1.0])
    assert drawn["grad norm (before clip)"]["grad norm (before clip)"].high == [6.0, 3.0]
    tournament = [r for r in read_metrics(a) if r["type"] != "train"]
    assert list(curves([tournament])["win rate"]) == ["KuhnPoker-v0-train: ckpt-0 vs random-valid",
                                                       "KuhnPoker-v0-train: ckpt-20 vs random-valid"]


def test_cli_plots_one_run_and_several(cli, tmp_path):
    one = tmp_path / "real"
    one.mkdir()
    shutil.copy(DATA / "kuhn-tiny-metrics.jsonl", one / "metrics.jsonl")
    done = cli("plot", str(one))
    assert done.returncode == 0, done.stderr
    assert (one / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = [str(write_run(tmp_path / f"seed{i}", {0: 0.5, 20: 0.6 + i / 20})) for i in range(3)]
    done = cli("plot", *runs, "--ceiling", "0.77", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "plot written to curve.png"
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_errors_are_one_line_and_exit_2(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    for args in (["plot", str(tmp_path / "empty")], ["plot"], ["plot", str(write_run(tmp_path / "r", {0: 0.5})), "--ceiling", "2"]):
        done = cli(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (args, done.stderr)
    assert "no metrics.jsonl" in cli("plot", str(tmp_path / "empty")).stderr


def test_plot_runs_writes_where_asked(tmp_path):
    run = write_run(tmp_path / "r", {0: 0.5, 10: 0.6})
    path = plot_runs([run], tmp_path / "out.png", ceiling=0.77)
    assert path == tmp_path / "out.png" and path.stat().st_size > 1000


def test_exploitability_gets_a_panel_of_its_own_with_reference_lines(tmp_path):
    """Evaluations with policy metrics (one figure per env, whatever the opponent) are drawn on a
    log-scale exploitability panel, mean and range over seeds; `--reference` adds lines."""
    from unstable_core.plotting import read_metrics

    runs = []
    for name, values in (("a", {0: 0.48, 40: 0.3}), ("b", {0: 0.46, 40: 0.2})):
        run = write_run(tmp_path / name, {0: 0.5, 40: 0.6})
        extra = [{"type": "eval", "step": s, "env_id": "openspiel/kuhn_poker", "model": f"ckpt-{s}", "opponent": opp,
                  "games": 100, "win_rate": 0.5, "draw_rate": 0.0, "loss_rate": 0.5, "invalid_rate": 0.0,
                  "policy": {"exploitability": v, "nash_conv": 2 * v}} for s, v in values.items() for opp in ("random-valid", "cfr")]
        with (run / "metrics.jsonl").open("a") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in extra))
        runs.append(run)
    drawn = curves([read_metrics(r) for r in runs])
    (label,) = drawn["exploitability"]
    assert label == "openspiel/kuhn_poker"
    assert drawn["exploitability"][label].mean == pytest.approx([0.47, 0.25]) and drawn["exploitability"][label].low == [0.46, 0.2]
    out = plot_runs(runs, tmp_path / "curve.png", references={"uniform": 0.4583, "cfr": 0.0009})
    assert out.stat().st_size > 10_000
    assert "exploitability" not in curves([read_metrics(write_run(tmp_path / "c", {0: 0.5}))])


def test_runs_grouped_by_sampler_are_averaged_within_their_group_with_their_mixtures(cli, tmp_path):
    """`--group-by model_sampler.name`: seeds of one sampler make one curve and band, each sampler
    its own; the population's mixtures (eval_mixtures) are curves of the exploitability panel."""
    from unstable_core.plotting import config_value, read_metrics

    runs = []
    for sampler, seeds in (("mirror", {0: 0.30, 1: 0.20}), ("psro", {0: 0.10, 1: 0.06})):
        for seed, latest in seeds.items():
            run = tmp_path / f"{sampler}-{seed}"
            run.mkdir()
            records = [{"type": "start", "step": 0, "time": 0.0, "config": {"model_sampler": {"name": sampler}, "seed": seed}}]
            records += [{"type": "eval", "step": s, "env_id": "openspiel/kuhn_poker", "model": f"ckpt-{s}", "opponent": "random-valid",
                         "games": 100, "win_rate": 0.5, "draw_rate": 0.0, "loss_rate": 0.5, "invalid_rate": 0.0,
                         "policy": {"exploitability": 0.4 if s == 0 else latest},
                         "mixtures": {"uniform": {"exploitability": 0.4 if s == 0 else latest + 0.01}}} for s in (0, 40)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
            runs.append(run)
    metrics = [read_metrics(r) for r in runs]
    assert [config_value(m, "model_sampler.name") for m in metrics] == ["mirror", "mirror", "psro", "psro"]
    assert config_value(metrics[0], "seed") == "0" and config_value(metrics[0], "learner.lr") == "-"
    assert config_value(metrics[0], "model_sampler.name, learner.lr, seed") == "mirror/0"
    drawn = curves(metrics, [config_value(m, "model_sampler.name") for m in metrics])["exploitability"]
    assert sorted(drawn) == ["mirror: openspiel/kuhn_poker", "mirror: openspiel/kuhn_poker uniform mixture",
                             "psro: openspiel/kuhn_poker", "psro: openspiel/kuhn_poker uniform mixture"]
    psro = drawn["psro: openspiel/kuhn_poker"]
    assert psro.runs == 2 and psro.mean == pytest.approx([0.4, 0.08]) and (psro.low, psro.high) == ([0.4, 0.06], [0.4, 0.1])
    assert drawn["mirror: openspiel/kuhn_poker uniform mixture"].mean == pytest.approx([0.4, 0.26])
    assert set(curves(metrics)["exploitability"]) == {"openspiel/kuhn_poker", "openspiel/kuhn_poker uniform mixture"}  # all pooled
    done = cli("plot", *map(str, runs), "--group-by", "model_sampler.name", "--out", str(tmp_path / "g.png"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("content,message", [
    (b'{"type": "start"}\n\x00\xff\n', "metrics.jsonl:2: not valid JSON"),
    (b'[1, 2]\n', "metrics.jsonl:1: not a record (a JSON object)"),
    (b'{"type": "eval", "step": 0, "opponent": "x", "win_rate": 0.5, "invalid_rate": 0}\n',
     "metrics.jsonl:1: a malformed eval record (env_id: field required)"),
    (b'{"type": "train", "step": "q"}\n', "metrics.jsonl:1: a malformed train record (step: input should be a valid integer"),
])
def test_a_damaged_metrics_log_is_one_line_naming_the_line(cli, tmp_path, content, message):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_bytes(content)
    proc = cli("plot", str(tmp_path / "r"), "--out", str(tmp_path / "c.png"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_one_run_has_standard_errors_runs_of_unequal_length_are_named_and_a_tournament_is_bars(cli, tmp_path):
    from unstable_core.plotting import binomial_se, is_tournament, read_metrics

    a = write_run(tmp_path / "a", {0: 0.5, 20: 0.7, 40: 0.75})
    b = write_run(tmp_path / "b", {0: 0.6, 20: 0.6})
    one = curves([read_metrics(a)])["win rate"]["KuhnPoker-v0-train vs random-valid"]
    assert one.error == pytest.approx([(0.5 * 0.5 / 400) ** 0.5, (0.7 * 0.3 / 400) ** 0.5, (0.75 * 0.25 / 400) ** 0.5])
    assert binomial_se(0.5, 0) == 0.0
    assert curves([read_metrics(a), read_metrics(b)])["win rate"]["KuhnPoker-v0-train vs random-valid"].error is None
    warned = []
    plot_runs([a, b], tmp_path / "ab.png", warn=warned.append)
    assert warned == ["the runs differ in length (a: step 40, b: step 20); the curves stop at step 20, the last every run reached"]
    done = cli("plot", str(a), str(b), "--out", str(tmp_path / "cli.png"))
    assert done.returncode == 0 and done.stderr.startswith("warning: the runs differ in length (a: step 40, b: step 20)")

    tournament = tmp_path / "t"
    tournament.mkdir()
    records = [r for r in read_metrics(a) if r["type"] == "eval" and r["step"] == 0]
    records += [{**records[0], "model": "greedy", "win_rate": 0.9}]
    (tournament / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert is_tournament([read_metrics(tournament)]) and not is_tournament([read_metrics(a)])
    out = plot_runs([tournament], tmp_path / "bars.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_long_title_is_folded_at_spaces_ampersands_and_commas():
    from unstable_core.plotting import wrapped

    spec = "kuhn (tiny:openspiel/kuhn_poker?sft_agent=cfr&sft_backend=openspiel&sft_targets=policy&sft_mix=0.2&sft_steps=600): 3 runs"
    lines = wrapped(spec, width=60).split("\n")
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert "".join(lines).replace(" ", "") == spec.replace(" ", "")  # nothing lost but the spaces it broke at
    assert all(line.endswith(("&", ",")) or f"{line} " in spec for line in lines[:-1])  # never inside a word
    assert wrapped("short") == "short"
