"""The `wandb` tracker: the run's metrics records, logged to one W&B run.

Step axes: W&B's own ``_step`` only counts log calls (so it never decreases); charts use
``learner_step`` (train and eval records) or ``games`` (collection and ratings records), declared
with ``define_metric``. The W&B run id is kept in ``RUN_DIR/wandb-run.json``, so that a resumed
run (``unstable run --resume``) goes on in the same W&B run.

=============== =======================================================================
record          logged as
=============== =======================================================================
``start``       config: the resolved run config, plus ``plugins`` (name -> version)
``train``       ``train/<metric>`` and ``train/learner_tokens_per_s``, at ``learner_step``; the
                run summary's ``train/logprob_gap_mean`` / ``_max`` are the largest logged
``eval``        ``eval/<env>/<model>/<opponent>/<rate>`` at ``learner_step``; in a training
                run the model is ``policy`` and ``.../checkpoint_step`` says which checkpoint
                played (the latest saved: 0 for the base model); exact
                policy metrics (``collection.eval_policy_metrics``) as
                ``policy/<env>/<model>/<metric>`` (exploitability, nash_conv, invalid_mass),
                the population's mixtures' (``collection.eval_mixtures``) as
                ``policy/<env>/<uniform|meta>-mixture/<metric>``
``summary``     ``collection/...`` (games/s, failures, buffer, per (mode, env) rates over every game so
                far: ``win_rate_so_far``, ...) at ``games``
``restart``     ``executor/restarts`` (so far) and ``executor/restarted/<role>`` (1) at ``learner_step``;
                the summary's count as ``collection/restarts``
``ratings``     ``ratings/<model>/<number>`` and ``ratings/<model>/games`` (games it played) at ``games``
``transcript``  rows of the ``transcripts`` table, one per turn (step, mode, env, seed, player, model,
                opponent, prompt, completion, action, reward, outcome), logged incrementally every
                ``table_every_s``
``end``         ``finish(exit_code)``: 0 completed, 130 interrupted, 1 failed; an offline run then
                prints the ``wandb sync DIR`` command that uploads it, once, on stderr
=============== =======================================================================
"""

from __future__ import annotations

import json
import os
import secrets
import string
import sys
import time
from pathlib import Path
from typing import Any

from unstable_core import BuildContext, Record
from unstable_core.progress import verbose

from .options import WandbOptions

RUN_ID_FILE = "wandb-run.json"
EXIT_CODES = {"completed": 0, "interrupted": 130, "failed": 1}
TABLE_COLUMNS: list[str | int] = ["step", "mode", "env", "seed", "player", "model", "opponent", "prompt", "completion",
                                  "action", "reward", "outcome"]
RATES = ("win_rate", "draw_rate", "loss_rate", "invalid_rate", "format_rate")


def key_part(text: str) -> str:
    """A model or env name as one part of a W&B key ('/' separates sections)."""
    return str(text).replace("/", "_")


def player_outcome(rewards: dict[int, float], player_id: int, game_outcome: str) -> str:
    """How the game ended for one player: ``failed`` for a failed game, else win/draw/loss by
    comparing its reward with the best other player's (one player alone: the sign of its reward),
    as ``GameResult.outcomes`` counts it."""
    if game_outcome == "failed":
        return "failed"
    if player_id not in rewards:
        return "draw"
    mine = rewards[player_id]
    best_other = max((r for p, r in rewards.items() if p != player_id), default=0.0)
    return "win" if mine > best_other else "loss" if mine < best_other else "draw"


class WandbTracker:
    def __init__(self, options: WandbOptions, ctx: BuildContext) -> None:
        import wandb

        self.options = options
        self.training = ctx.config.get("learner") is not None
        run_dir = Path(ctx.run_dir) if ctx.run_dir else None
        run_id, resumed = self._run_id(run_dir)
        name = options.run_name or (f"{ctx.config.get('name', 'unstable')}/{run_dir.name}" if run_dir else None)
        folder = run_dir if run_dir is None or options.dir is None else run_dir / options.dir
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        self.run: Any = wandb.init(  # None once closed
            project=options.project, entity=options.entity, group=options.group, tags=options.tags or None, name=name,
            notes=options.notes, mode=options.mode, dir=str(folder) if folder is not None else None, id=run_id,
            resume="allow" if resumed else None, config=dict(ctx.config),
            settings=wandb.Settings(console="off", quiet=not verbose(), silent=not verbose(), init_timeout=options.init_timeout_s),
        )
        for axis in ("learner_step", "games"):
            self.run.define_metric(axis, hidden=True)
        for prefix, axis in (("train", "learner_step"), ("eval", "learner_step"), ("collection", "games"), ("ratings", "games")):
            self.run.define_metric(f"{prefix}/*", step_metric=axis)
        for key in ("train/logprob_gap_mean", "train/logprob_gap_max"):  # the run's worst in its summary, not its last
            self.run.define_metric(key, step_metric="learner_step", summary="max")
        self.table: Any = None
        if options.transcripts:
            self.table = wandb.Table(columns=TABLE_COLUMNS, log_mode="INCREMENTAL")
        self.table_rows = self.logged_rows = 0
        self.last_table_log = time.monotonic()
        self.exit_code: int | None = None

    @staticmethod
    def _run_id(run_dir: Path | None) -> tuple[str, bool]:
        """(the W&B run id, whether it continues an earlier one), kept in the run directory."""
        run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(12))
        if run_dir is None:
            return run_id, False
        path = run_dir / RUN_ID_FILE
        if path.exists():
            return json.loads(path.read_text())["id"], True
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"id": run_id}))
        os.replace(tmp, path)
        return run_id, False

    # -- records ----------------------------------------------------------------------------------
    def log(self, record: Record) -> None:
        handler = getattr(self, f"_on_{record.type}", None)
        if handler is not None:
            handler(record)

    def _on_start(self, r: Any) -> None:
        plugins = {p.get("name", "?"): p.get("version") for p in r.plugins}
        self.run.config.update({"plugins": plugins, "run_dir": r.run_dir}, allow_val_change=True)

    def _on_train(self, r: Any) -> None:
        data = {f"train/{k}": v for k, v in r.model_dump().items()
                if k not in ("type", "step", "time") and isinstance(v, (int, float)) and not isinstance(v, bool)}
        tokens, seconds = data.get("train/train_tokens"), data.get("train/update_s")
        if tokens is not None and seconds:
            data["train/learner_tokens_per_s"] = tokens / seconds
        self.run.log({"learner_step": r.step, **data})

    def _on_eval(self, r: Any) -> None:
        model = key_part(r.model) if not self.training else "policy"
        base = f"eval/{key_part(r.env_id)}/{model}/{key_part(r.opponent)}"
        data = {"learner_step": r.step, **{f"{base}/{k}": getattr(r, k) for k in RATES}, f"{base}/games": r.games}
        if r.mean_return is not None:  # the env's reward, chips for poker
            data[f"{base}/mean_return"] = r.mean_return
        if self.training:  # the checkpoint that played: with eval_every not a multiple of save_every, an earlier one
            data[f"{base}/checkpoint_step"] = int(r.model.split("-")[-1]) if r.model.startswith("ckpt-") else 0
        # exact policy metrics are the model's on the env, whatever the opponent
        data.update({f"policy/{key_part(r.env_id)}/{model}/{k}": v for k, v in r.policy.items()})
        for name, figures in r.mixtures.items():  # the population's mixtures (eval_mixtures)
            data.update({f"policy/{key_part(r.env_id)}/{name}-mixture/{k}": v for k, v in figures.items()})
        self.run.log(data)

    def _on_summary(self, r: Any) -> None:
        data: dict[str, Any] = {
            "games": r.games, "collection/games_per_s": r.games_per_s, "collection/failed": r.failed,
            "collection/buffer_size": r.buffer_size, "collection/generated_tokens": r.generated_tokens,
            "collection/learner_step": r.step, "collection/restarts": r.restarts,
        }
        data.update({f"collection/failures/{key_part(reason)}": n for reason, n in r.failures.items()})
        for mode, per_env in r.envs.items():
            for env_id, totals in per_env.items():
                base = f"collection/{mode}/{key_part(env_id)}"  # every game so far: not an evaluation's rate
                data.update({f"{base}/{k}_so_far" if k.endswith("_rate") else f"{base}/{k}": v
                             for k, v in totals.model_dump().items()})
        self.run.log(data)

    def _on_restart(self, r: Any) -> None:
        self.run.log({"learner_step": r.step, "executor/restarts": r.restarts, f"executor/restarted/{key_part(r.role)}": 1})

    def _on_ratings(self, r: Any) -> None:
        data: dict[str, Any] = {"games": r.games}
        for uid, numbers in r.ratings.items():
            data.update({f"ratings/{key_part(uid)}/{k}": v for k, v in numbers.items()})
        data.update({f"ratings/{key_part(uid)}/games": n for uid, n in r.model_games.items()})
        self.run.log(data)

    def _on_transcript(self, r: Any) -> None:
        if self.table is None or self.table_rows >= self.options.max_table_rows:
            return
        uids = {int(seat["player_id"]): str(seat.get("uid")) for seat in r.seats}
        for turn in r.turns:
            model = uids.get(turn.player_id, "?")
            opponent = ", ".join(uid for pid, uid in sorted(uids.items()) if pid != turn.player_id)
            self.table.add_data(r.step, r.mode, r.env_id, r.seed, turn.player_id, model, opponent, turn.observation,
                                turn.completion, turn.action, r.rewards.get(turn.player_id),
                                player_outcome(r.rewards, turn.player_id, r.outcome))
            self.table_rows += 1
        if time.monotonic() - self.last_table_log >= self.options.table_every_s:
            self._log_table()

    def _on_end(self, r: Any) -> None:
        self.exit_code = EXIT_CODES[r.status]

    def _log_table(self) -> None:
        self.last_table_log = time.monotonic()
        if self.table is not None and self.table_rows > self.logged_rows:
            self.run.log({"transcripts": self.table})  # INCREMENTAL: only the rows added since the last log
            self.logged_rows = self.table_rows

    def close(self) -> None:
        if self.run is None:
            return
        try:
            self._log_table()
        finally:
            run, self.run = self.run, None
            run.finish(exit_code=1 if self.exit_code is None else self.exit_code)
            self._say_sync(run)

    @staticmethod
    def _say_sync(run: Any) -> None:
        """An offline run's upload command, once, when it is finished: ``wandb sync DIR``."""
        settings = getattr(run, "settings", None)
        sync_dir = getattr(settings, "sync_dir", None)
        if getattr(settings, "mode", None) == "offline" and sync_dir:
            print(f"unstable: W&B run kept offline; upload it with: wandb sync {sync_dir}", file=sys.stderr, flush=True)
