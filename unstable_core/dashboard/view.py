"""The dashboard drawn with rich: progress, throughput, learner figures, collection stats, the
latest evaluations, a ratings leaderboard, a match heatmap and failures.

``render(state, width)`` returns one renderable that fits ``width`` columns: sections stacked
below 120 columns, ratings and heatmap side by side from 120 on. Numbers are never split: lines
of figures break only between figures (``pack``), and a table cuts only its text columns (with an
ellipsis), never a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..progress import clock
from .state import DashboardState

WIDE = 120  # from this width on: ratings and heatmap side by side
EVAL_ROWS = 8
STYLES = {"running": "bold cyan", "starting": "yellow", "completed": "bold green", "interrupted": "bold yellow", "failed": "bold red"}


def duration(seconds: float | None) -> str:
    return "?" if seconds is None else clock(seconds)


def number(value: float | None, digits: int = 1) -> str:
    """A rate or count for humans: 1,234 / 12.3 / 0.123; '-' when unknown."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.{digits}f}"
    return f"{value:.{max(digits, 2)}f}" if value else "0"


def progress_text(state: DashboardState) -> str:
    done, total = state.done, state.total
    pct = f" {100 * done / total:.0f}%" if total else ""
    eta = state.eta_s()
    eta_text = "" if state.status != "running" else f" · eta {duration(eta)}"
    return f"{state.unit} {done}/{total}{pct} · elapsed {duration(state.elapsed_s())}{eta_text}"


def pack(parts: list[str], width: int, sep: str = " · ") -> list[str]:
    """Join ``parts`` into lines of at most ``width`` characters, breaking only between parts."""
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def throughput_parts(state: DashboardState) -> list[str]:
    parts = [f"games {state.games:,}", f"{number(state.games_per_s())} games/s"]
    gen = state.generation_tokens_per_s()
    if gen is not None:
        parts.append(f"gen {number(gen, 0)} tok/s")
    if state.mode == "train":
        parts.append(f"learner {number(state.learner_tokens_per_s(), 0)} tok/s")
        if state.train:
            parts.append(f"staleness {state.train.get('staleness_mean', 0):.2f} (max {state.train.get('staleness_max', 0):.0f})")
        parts.append(f"buffer {state.buffer[0]}/{state.buffer[1]}")
    return parts


def throughput_text(state: DashboardState) -> str:
    return " · ".join(throughput_parts(state))


LEARNER_FIGURES = {  # train record key -> (label, format)
    "loss": ("loss", "{:.4g}"), "policy_loss": ("policy loss", "{:.4g}"), "value_loss": ("value loss", "{:.4g}"),
    "entropy": ("entropy", "{:.3g}"), "kl": ("kl", "{:.3g}"), "grad_norm": ("grad norm", "{:.3g}"),
    "train_tokens": ("tokens", "{:,.0f}"), "prefix_share": ("shared", "{:.0%}"), "update_s": ("update", "{:.2f} s"),
}


def learner_parts(state: DashboardState) -> list[str]:
    t = state.train
    if not t:
        return []
    shown = [f"{label} {fmt.format(float(t[k]))}" for k, (label, fmt) in LEARNER_FIGURES.items() if isinstance(t.get(k), (int, float))]
    if state.logprob_gap is not None:
        shown.append(logprob_gap_text(state.logprob_gap, state.logprob_gap_tolerance))
    return [f"learner step {t.get('step', 0)}: {shown[0]}" if shown else f"learner step {t.get('step', 0)}", *shown[1:]]


def logprob_gap_text(gap: tuple[int, float, float], tolerance: float | None) -> str:
    """``logprob gap 2.9e-07 (max 1.6e-06, step 1)``: rollout vs learner logprobs at the latest
    update that measured them; ``over 0.01`` when the mean passed the run's tolerance."""
    step, mean, largest = gap
    over = f" over {tolerance:g}" if tolerance is not None and mean > tolerance else ""
    return f"logprob gap {mean:.2g} (max {largest:.2g}, step {step}){over}"


def learner_text(state: DashboardState) -> str:
    return " · ".join(learner_parts(state))


def failure_parts(state: DashboardState) -> list[str]:
    """``failures: N`` and one ``Reason count`` per reason, most frequent first."""
    if not state.failed:
        return []
    reasons = [f"{k} {v}" for k, v in sorted(state.failures.items(), key=lambda kv: (-kv[1], kv[0]))]
    return [f"failures: {state.failed}", *reasons]


def restart_line(r: Mapping[str, Any]) -> str:
    """``rollout-0 (pid 3519) died at step 12: killed by SIGKILL; restarted (1 of 3)``."""
    pid = f" (pid {r['pid']})" if r.get("pid") is not None else ""
    return f"{r['role']}{pid} died at step {r['step']}: {r['cause']}; restarted ({r['restarts']} of {r['max_restarts']})"


def failures_text(state: DashboardState) -> str:
    parts = failure_parts(state)
    return f"{parts[0]} ({', '.join(parts[1:])})" if parts else ""


def _cell_width(cell: Any) -> int:
    return len(cell.plain if hasattr(cell, "plain") else cell)


def _table(title: str, headers: list[str], rows: list[list[Any]], width: int, left: int = 1) -> Any:
    """A compact table that fits ``width`` columns. The first ``left`` columns are text: the
    widest is cut (with an ellipsis) until the table fits. The others are numbers, never cut."""
    from rich import box
    from rich.table import Table

    widths = [max([len(h)] + [_cell_width(r[i]) for r in rows]) for i, h in enumerate(headers)]
    gaps = 2 * (len(headers) - 1)
    while sum(widths) + gaps > width:
        widest = max(range(left), key=lambda i: widths[i])
        if widths[widest] <= 5:
            break
        widths[widest] -= 1
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1, 0, 0), pad_edge=False,
              show_edge=False, title_style="bold")
    for i, (header, w) in enumerate(zip(headers, widths)):
        t.add_column(header, justify="left" if i < left else "right", no_wrap=True, overflow="ellipsis", width=w)
    for row in rows:
        t.add_row(*row)
    return t


RATES = ("win_rate", "draw_rate", "loss_rate", "invalid_rate")
RATE_HEADERS = ["win", "draw", "loss", "inval"]
MODES = {"tournament": "tourn"}


def collection_table(state: DashboardState, width: int) -> Any:
    rows = [[MODES.get(mode, mode), env_id, f"{int(r['games']):,}", *(f"{r.get(k, 0.0):.2f}" for k in (*RATES, "format_rate")),
             f"{r.get('mean_turns', 0.0):.1f}"]
            for mode, per_env in sorted(state.envs.items()) for env_id, r in sorted(per_env.items())]
    return _table("collection (anchor seat)", ["mode", "env", "games", *RATE_HEADERS, "fmt", "turns"], rows, width, left=2)


def more(title: str, cut: int) -> str:
    """A table's title, with ``+N more`` when it shows only some of its rows."""
    return f"{title} (+{cut} more)" if cut > 0 else title


def eval_table(state: DashboardState, width: int) -> Any:
    every = state.latest_evals()
    latest = every[:EVAL_ROWS]  # the newest
    rows = [[r["env_id"], r["model"], r["opponent"], str(r["step"]), str(r["games"]), *(f"{r[k]:.2f}" for k in RATES)]
            for r in latest]
    headers = ["env", "model", "opponent", "step", "games", *RATE_HEADERS]
    if any(r.get("mean_return") is not None for r in latest):  # the env's reward (chips for poker); older records lack it
        headers.append("return")
        for row, r in zip(rows, latest):
            row.append("-" if r.get("mean_return") is None else f"{r['mean_return']:+.2f}")
    if any("exploitability" in (r.get("policy") or {}) for r in latest):  # exact policy metrics: one more column
        headers.append("exploit")
        for row, r in zip(rows, latest):
            value = (r.get("policy") or {}).get("exploitability")
            row.append("-" if value is None else f"{value:.4f}")
    for name in sorted({name for r in latest for name in (r.get("mixtures") or {})}):  # the population's mixtures
        headers.append(f"{name[:4]} mix")
        for row, r in zip(rows, latest):
            value = ((r.get("mixtures") or {}).get(name) or {}).get("exploitability")
            row.append("-" if value is None else f"{value:.4f}")
    return _table(more("latest evaluations", len(every) - len(latest)), headers, rows, width, left=3)


def ratings_table(state: DashboardState, limit: int, bar_width: int, width: int) -> Any:
    from rich.text import Text

    every = state.leaderboard(None)
    board = every[:limit]
    counts = state.model_games  # games per model, where the ratings records carry them
    if counts:
        bar_width = max(4, bar_width - 6)  # room for the games column
    rows = []
    if board:
        lo, hi = min(r[1] for r in board), max(r[1] for r in board)
        for i, (uid, value, sigma) in enumerate(board, 1):
            shown = f"{value:.1f} ± {sigma:.1f}" if sigma is not None else f"{value:.2f}"
            filled = bar_width if hi == lo else 1 + round((value - lo) / (hi - lo) * (bar_width - 1))
            games = [f"{counts[uid]:,}" if uid in counts else "-"] if counts else []
            rows.append([f"{i} {uid}", shown, *games, Text("█" * filled + " " * (bar_width - filled), style="cyan")])
    headers = ["model", "rating", *(["games"] if counts else []), ""]
    t = _table(more("ratings", len(every) - len(board)), headers, rows, width)
    t.columns[-1].justify = "left"
    return t


HEAT = ("grey15", "grey23", "grey35", "dark_cyan", "cyan3", "bright_cyan")


def heatmap_table(state: DashboardState, limit: int, width: int) -> Any:
    """Games played between each pair of the top models (by rating)."""
    from rich.text import Text

    uids = [uid for uid, _, _ in state.leaderboard(limit)]
    counts = state.matches(uids)
    peak = max(counts.values(), default=0)
    rows = []
    for i, a in enumerate(uids, 1):
        cells: list[Any] = [f"{i} {a}"]
        for b in uids:
            n = counts.get((a, b), 0)
            shade = HEAT[min(len(HEAT) - 1, round(n / peak * (len(HEAT) - 1)))] if peak and n else ""
            shown = str(n) if n < 10_000 else f"{n // 1000}k"
            cells.append(Text(f"{shown:>4}", style=f"on {shade}" if shade else "") if a != b else "·")
        rows.append(cells)
    return _table("matches (top models)", ["model", *(f"{i:>4}" for i in range(1, len(uids) + 1))], rows, width)


def render(state: DashboardState, width: int) -> Any:
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    wide = width >= WIDE
    head = Text.assemble(("unstable", "bold"), f" · {state.name or '?'} · ", (state.status, STYLES.get(state.status, "")))
    if state.error:
        head.append(f" · {state.error}", style="red")
    if state.setup is not None:
        head.append(f" · {state.setup.description} {state.setup.text()}", style="yellow")
    bar = Table.grid(padding=(0, 1))
    bar.add_column(no_wrap=True)
    bar.add_column(no_wrap=True)
    bar_width = max(10, min(40, width - 52))
    bar.add_row(ProgressBar(total=max(state.total, 1), completed=min(state.done, state.total), width=bar_width),
                progress_text(state))
    parts: list[Any] = [head, bar]
    parts += [Text(line) for line in pack(throughput_parts(state), width) + pack(learner_parts(state), width)]
    parts += [Text(line, style="red") for line in pack(failure_parts(state), width, sep=" · ")]
    parts += [Text(restart_line(r), style="yellow") for r in state.restarts[-3:]]  # the latest few
    limit = 8 if wide else 6
    # a section shows once it has data: empty tables before the first games only take room
    if state.envs:
        parts.append(collection_table(state, width))
    if state.evals:
        parts.append(eval_table(state, width))
    if not state.leaderboard(limit):
        return Group(*parts)
    side = min(48, (width - 4) // 2) if wide else width  # the ratings' share; the heatmap gets the rest
    ratings, heatmap = ratings_table(state, 10, 16, side), heatmap_table(state, limit, width - side - 4 if wide else width)
    if wide:  # the ratings beside the heatmap
        grid = Table.grid(padding=(0, 4))
        grid.add_row(ratings, heatmap)
        parts.append(grid)
    else:
        parts += [ratings, heatmap]
    return Group(*parts)


def render_text(state: DashboardState, width: int) -> str:
    """The dashboard as plain text at ``width`` columns (tests, ``unstable watch --once``)."""
    import io

    from rich.console import Console

    buffer = io.StringIO()
    console = Console(width=width, file=buffer, force_terminal=False, color_system=None)
    console.print(render(state, width))
    return buffer.getvalue()
