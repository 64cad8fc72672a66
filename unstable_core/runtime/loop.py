"""The loop: builds the components of a RunConfig and runs DESIGN's three stages.

1. Collect: the scheduler picks an env (env_sampler) and opponents (model_sampler) for each game,
   keeps ``num_train_games`` training games and ``num_eval_games`` evaluation games in flight.
2. Ingest: registry counts, rater, buffer (final + step transforms), trackers, transcripts,
   ``unstable_game_end``; back-pressure pauses collection while the buffer is full.
3. Train: draw (sampling transforms) -> filter -> learner update -> checkpoint -> registry ->
   inference -> hooks; evaluation before training, every ``eval_every`` updates and at the end.

Without a learner the loop plays a tournament between the fixed agents instead.
An executor decides where this runs; the built-in ``local`` one runs it in one asyncio process.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..components import PROTOCOLS, BuildContext
from ..config import RunConfig, resolve_components, validate_options
from ..errors import ConfigError, PluginError, UnstableError
from ..plugins import PluginSystem
from ..types import (
    Batch,
    BatchEndContext,
    CheckpointContext,
    EnvSpec,
    GameEndContext,
    GameResult,
    GameSpec,
    ModelRef,
    RunEndContext,
    RunStartContext,
    ValidationEndContext,
    ValidationStartContext,
    _trusted,
)
from .jsonio import json_line, write_json_atomic
from .registry import ModelRegistry
from .rewards import RewardPipelines
from .runner import GameRunner, derive_seed, index_seed, unit_hash

TRANSCRIPT_TEXT_LIMIT = 2000
SUMMARY_EVERY_S = 1.0


def _clip(text: str, limit: int = TRANSCRIPT_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


class RunFailed(UnstableError):
    """The run could not go on (e.g. every game fails)."""


class Loop:
    def __init__(self, cfg: RunConfig, system: PluginSystem, run_dir: str | os.PathLike[str], source: str = "<config>") -> None:
        self.cfg = cfg
        self.system = system
        self.source = source
        self.run_dir = Path(run_dir)
        self._subscribed: list[Any] = []
        self.resolved = resolve_components(cfg, system, source)
        self.hook = system.hook
        self.registry = ModelRegistry()
        for opp in cfg.opponents:
            self.registry.add(opp.ref())
        self.base_ref = cfg.model_ref()
        if self.base_ref is not None:
            if self.base_ref.uid in self.registry.entries:
                raise ConfigError(f"{source}: model.uid {self.base_ref.uid!r} is also an opponent uid")
            self.registry.add(self.base_ref, current=True)

        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "games").mkdir(exist_ok=True)
        self.rewards = RewardPipelines(
            *[
                [self._build(f"reward.{stage}.{i}") for i in range(len(getattr(cfg.reward, stage)))]
                for stage in ("final", "step", "sampling")
            ]
        )
        self.env_provider = self._build("env")
        self.env_sampler = self._build("env_sampler")
        self.model_sampler = self._build("model_sampler")
        self.rater = self._build("rater")
        self.buffer = self._build("buffer")
        self.executor = self._build("executor")
        self.trackers = [self._build(f"trackers.{i}") for i in range(len(cfg.trackers))]
        self._game_trackers = [t for t in self.trackers if getattr(t, "wants_game_records", False)]
        self.collection_stats = CollectionStats()
        self._templates: dict[str, Any] = {}
        self._backends: dict[str, Any] = {}
        for ref in self.registry.fixed() + ([self.base_ref] if self.base_ref else []):
            backend = self.backend(ref.backend)
            check = getattr(backend, "check_model", None)
            if check is not None:
                try:
                    check(ref)
                except ValueError as exc:
                    raise ConfigError(f"{source}: model {ref.uid!r}: {exc}") from None
        self.learner = self._build("learner") if cfg.learner is not None else None
        self.runner = GameRunner(self.env_provider, self.template, self.backend, cfg.collection.max_turns)

        # run state
        self.step = 0
        self.games_played = 0
        self.game_idx = 0
        self.failures: Counter[str] = Counter()
        self.consecutive_failures = 0
        self.dropped_total = 0
        self.evaluated: set[tuple[str, str, str]] = set()
        self.eval_records: list[dict[str, Any]] = []
        # set when a game was ingested (the trainer waits on it) / when the trainer drew a batch
        # or stopped (a back-pressured collector waits on it)
        self._grew, self._drained = asyncio.Event(), asyncio.Event()
        self.empty_batches = 0
        self._stop = False
        self._start_time = time.monotonic()
        self._last_summary = 0.0
        self._transcripts: dict[str, Any] = {}
        # one seeded stream for every scheduling draw: games are scheduled in index order, so the
        # draws of game k are determined by the run seed (and a fresh Random per game costs more
        # than the rest of scheduling together)
        self._schedule_rng = random.Random(derive_seed(cfg.seed, "schedule"))
        self._transcript_key = derive_seed(cfg.seed, "transcripts")
        self._game_seed_key = derive_seed(cfg.seed, "games")

    # -- building -------------------------------------------------------------------------------
    def context(self, key: str) -> BuildContext:
        return BuildContext(
            run_dir=str(self.run_dir),
            seed=derive_seed(self.cfg.seed, key),
            registry=self.registry,
            config=self.cfg.model_dump(mode="json"),
            hook=self.hook,
            build=self.build_component,
            rewards=getattr(self, "rewards", None),
            subscribe=self._subscribe,
        )

    def _subscribe(self, component: Any) -> None:
        name = f"component-{type(component).__name__}-{id(component)}"
        self.system.pm.register(component, name=name)
        self._subscribed.append(component)

    def _build(self, key: str) -> Any:
        spec, options = self.resolved[key]
        return self._instantiate(spec, options, key)

    def _instantiate(self, spec: Any, options: BaseModel, key: str) -> Any:
        record = self.system.provider_of(spec.kind, spec.name)
        where = f"{spec.kind} {spec.name!r} from plugin '{record.name}' ({record.package} {record.version})"
        try:
            obj = spec.factory(options, self.context(key))
        except UnstableError:
            raise
        except (ValueError, TypeError, ImportError, OSError) as exc:
            raise PluginError(f"{where} could not be built: {type(exc).__name__}: {exc}") from exc
        proto = PROTOCOLS.get(spec.kind)
        if proto is not None and not isinstance(obj, proto):
            raise PluginError(f"{where}: its factory returned {type(obj).__name__}, which lacks the {proto.__name__} protocol")
        if spec.kind == "reward_transform" and not callable(obj):
            raise PluginError(f"{where}: its factory must return a callable")
        return obj

    def build_component(self, kind: str, name: str, options: dict[str, Any] | None = None) -> Any:
        spec = self.system.get(kind, name)
        opts = validate_options(spec, options or {}, self.source, f"{kind}:{name}")
        return self._instantiate(spec, opts, f"{kind}:{name}")

    def template(self, name: str) -> Any:
        if name not in self._templates:
            self._templates[name] = self.build_component("template", name)
        return self._templates[name]

    def backend(self, name: str) -> Any:
        if name not in self._backends:
            if name == self.cfg.inference.name:
                spec, options = self.resolved["inference"]
                self._backends[name] = self._instantiate(spec, options, "inference")
            else:
                self._backends[name] = self.build_component("inference", name, self.cfg.backends.get(name, {}))
        return self._backends[name]

    # -- run directory ----------------------------------------------------------------------------
    def plugin_records(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.system.plugin_records()]

    def write_run_files(self) -> None:
        resolved = {key: {"name": spec.name, **options.model_dump(mode="json")} for key, (spec, options) in self.resolved.items()}
        write_json_atomic(self.run_dir / "config.json", {"config": self.cfg.model_dump(mode="json"), "components": resolved})
        write_json_atomic(self.run_dir / "plugins.json", self.plugin_records())
        self.registry.write(self.run_dir / "registry.json")

    def _transcript(self, result: GameResult) -> None:
        c = self.cfg.collection
        frac = c.eval_transcripts if result.game.mode == "eval" else c.transcripts
        # a fixed, seed-determined subset of game indices
        if frac <= 0 or (frac < 1 and unit_hash(self._transcript_key, result.game.game_idx) >= frac):
            return
        fh = self._transcripts.get(result.game.mode)
        if fh is None:
            fh = self._transcripts[result.game.mode] = open(
                self.run_dir / "games" / f"{result.game.mode}.jsonl", "a", encoding="utf-8", buffering=1 << 20
            )
        line = {
            "game_idx": result.game.game_idx,
            "mode": result.game.mode,
            "env_id": result.game.env.env_id,
            "seed": result.game.seed,
            "step": self.step,
            "seats": [{"player_id": i, "uid": r.uid, "version": r.version} for i, r in enumerate(result.game.seats)],
            "train_seats": result.game.train_seats,
            "rewards": result.rewards,
            "outcome": result.outcome,
            "error": result.error,
            "turns": [
                {
                    "player_id": t.player_id,
                    "observation": _clip(t.observation),
                    "completion": _clip(t.completion),
                    "action": _clip(t.action, 200),
                    "format_ok": t.format_ok,
                    "invalid": t.invalid,
                    "policy_version": t.policy_version,
                }
                for t in sorted((t for tr in result.trajectories for t in tr.turns), key=lambda t: t.index)
            ],
        }
        fh.write(json_line(line))  # flushed at the end of the run and with each summary

    # -- logging ----------------------------------------------------------------------------------
    def log(self, record: dict[str, Any]) -> None:
        record.setdefault("time", round(time.monotonic() - self._start_time, 3))
        for t in self.trackers:
            t.log(record)

    def _summary(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_summary < SUMMARY_EVERY_S:
            return
        self._last_summary = now
        for fh in self._transcripts.values():
            fh.flush()
        elapsed = max(now - self._start_time, 1e-9)
        self.log(
            {
                "type": "summary",
                "step": self.step,
                "games": self.games_played,
                "games_per_s": self.games_played / elapsed,
                "failed": sum(self.failures.values()),
                "failures": dict(self.failures),
                "buffer_size": self.buffer.size(),
                "buffer_capacity": self.buffer.capacity,
                "dropped_zero_advantage": self.dropped_total,
                "envs": self.collection_stats.snapshot(),
            }
        )
        self.log({"type": "ratings", "step": self.step, "games": self.games_played, "ratings": self.rater.ratings(self.registry)})

    # -- scheduling -------------------------------------------------------------------------------
    def _next_idx(self) -> int:
        idx = self.game_idx
        self.game_idx += 1
        return idx

    def _seat(self, env_n: int, anchor: ModelRef, actors: int, opponents: list[ModelRef], rng: random.Random) -> tuple[list[ModelRef], list[int]]:
        positions = [rng.randrange(env_n)] if actors == 1 else sorted(rng.sample(range(env_n), actors))
        it = iter(opponents)
        seats = [anchor if i in positions else next(it) for i in range(env_n)]
        return seats, positions

    def train_spec(self) -> GameSpec:
        idx = self._next_idx()
        rng = self._schedule_rng
        env = self.env_sampler.sample(self.cfg.train_envs, rng)
        anchor = self.registry.current
        assert anchor is not None
        actors = max(1, min(env.num_actors, env.num_players))
        opponents = self.model_sampler.sample(env, anchor, env.num_players - actors, self.registry, rng)
        seats, positions = self._seat(env.num_players, anchor, actors, list(opponents), rng)
        return self._spec(idx, env, seats, positions, "train")

    def tournament_spec(self) -> GameSpec:
        idx = self._next_idx()
        rng = self._schedule_rng
        env = self.env_sampler.sample(self.cfg.train_envs or self.cfg.evaluation_envs, rng)
        anchor = rng.choice(self.registry.fixed())
        opponents = self.model_sampler.sample(env, anchor, env.num_players - 1, self.registry, rng)
        seats, _ = self._seat(env.num_players, anchor, 1, list(opponents), rng)
        return self._spec(idx, env, seats, [], "tournament")

    def _spec(self, idx: int, env: EnvSpec, seats: list[ModelRef], train_seats: list[int], mode: str) -> GameSpec:
        data = {
            "game_idx": idx, "seed": index_seed(self._game_seed_key, idx), "env": env, "seats": seats,
            "train_seats": train_seats, "mode": mode, "eval_step": None,
        }
        # the samplers' env and seats are used as they are when they are the core's own types;
        # anything else is validated
        if type(env) is not EnvSpec:
            return GameSpec.of(data)
        for ref in seats:
            if type(ref) is not ModelRef:
                return GameSpec.of(data)
        return _trusted(GameSpec, data)

    def eval_specs(self, step: int, model: ModelRef) -> list[GameSpec]:
        specs = []
        for env in self.cfg.evaluation_envs:
            for opp in self.registry.fixed():
                key = (model.uid, env.env_id, opp.uid)
                if key in self.evaluated:  # the cap: one round per (checkpoint, env, opponent)
                    continue
                self.evaluated.add(key)
                for k in range(self.cfg.collection.eval_games):
                    seats = [opp] * env.num_players
                    seats[k % env.num_players] = model
                    idx = self._next_idx()
                    specs.append(
                        GameSpec(game_idx=idx, seed=derive_seed(self.cfg.seed, "eval", env.env_id, k), env=env, seats=seats,
                                 mode="eval", eval_step=step)
                    )
        return specs

    # -- ingest -----------------------------------------------------------------------------------
    def ingest(self, result: GameResult) -> None:
        self.games_played += 1
        if result.outcome == "failed":
            self.failures[(result.error or "unknown").split(":")[0]] += 1
            self.consecutive_failures += 1
        else:
            self.consecutive_failures = 0
            self.registry.record_game(result)
            self.rater.update(result, self.registry)
            if result.game.mode == "train":
                self.buffer.add(result)
        self.collection_stats.add(result)
        if self._game_trackers:  # the per-game record is built only for trackers that ask for it
            record = self._game_record(result)
            for t in self._game_trackers:
                t.log(record)
        self._transcript(result)
        if self.hook.unstable_game_end.get_hookimpls():  # the context is built only for listeners
            self.hook.unstable_game_end(ctx=GameEndContext(run_dir=str(self.run_dir), result=result))
        self._summary()
        self._grew.set()
        if result.outcome == "failed":
            limit = self.cfg.collection.max_game_failures
            total_failed = sum(self.failures.values())
            if (limit is not None and total_failed > limit) or self.consecutive_failures >= 200:
                raise RunFailed(
                    f"{total_failed} games failed ({self.consecutive_failures} in a row); last error: {result.error}. "
                    f"Failures by reason: {dict(self.failures)}"
                )

    def _game_record(self, result: GameResult) -> dict[str, Any]:
        g = result.game
        anchor_pid = anchor_seat(g)
        traj = result.trajectories[anchor_pid] if anchor_pid < len(result.trajectories) else None
        return {
            "type": "game",
            "time": round(time.monotonic() - self._start_time, 3),
            "step": self.step,
            "game_idx": g.game_idx,
            "mode": g.mode,
            "env_id": g.env.env_id,
            "outcome": result.outcome,
            "error": result.error,
            "seats": [r.uid for r in g.seats],
            "rewards": {str(k): v for k, v in result.rewards.items()},
            "num_turns": result.num_turns,
            "anchor": g.seats[anchor_pid].uid if g.seats else None,
            "anchor_outcome": result.outcome_for(anchor_pid) if result.outcome != "failed" else None,
            "invalid": bool(traj and traj.made_invalid_move),
            "duration_s": round(result.duration_s, 6),
        }

    async def play(self, spec: GameSpec) -> GameResult:
        result = await self.runner.play(spec)
        self.ingest(result)
        return result

    async def run_pool(self, specs: Iterable[GameSpec], limit: int, on_result: Any = None) -> int:
        """Play specs with at most `limit` in flight, pulling specs lazily; return how many were
        played. Results are not kept: `on_result(result)` sees each one (e.g. an aggregator)."""
        it = iter(specs)
        played = 0
        last_yield = time.monotonic()

        async def worker() -> None:
            nonlocal played, last_yield
            for spec in it:
                result = await self.runner.play(spec)
                self.ingest(result)
                played += 1
                if on_result is not None:
                    on_result(result)
                del result, spec  # a suspended worker holds no finished game
                # a game whose agents answer at once never suspends: yield every few ms so that
                # other games, the trainer and Ctrl-C (task cancellation) get their turn
                now = time.monotonic()
                if now - last_yield > 0.002:
                    last_yield = now
                    await asyncio.sleep(0)

        await asyncio.gather(*(worker() for _ in range(max(1, limit))))
        return played

    # -- evaluation -------------------------------------------------------------------------------
    async def evaluate(self, step: int) -> list[dict[str, Any]]:
        model = self.registry.current
        opponents = self.registry.fixed()
        envs = self.cfg.evaluation_envs
        if model is None or not opponents or not envs or self.cfg.collection.eval_games == 0:
            return []
        ctx = ValidationStartContext(
            run_dir=str(self.run_dir), learner_step=step, model=model,
            env_ids=[e.env_id for e in envs], opponents=[o.uid for o in opponents],
        )
        if any(v is False for v in self.hook.unstable_validation_start(ctx=ctx)):
            self.log({"type": "eval_skipped", "step": step, "model": model.uid})
            return []
        agg = OutcomeAggregator(anchor=model.uid)
        await self.run_pool(self.eval_specs(step, model), self.cfg.collection.num_eval_games, agg.add)
        records = agg.records(step)
        for r in records:
            self.log(r)
        self.eval_records += records
        self.hook.unstable_validation_end(ctx=ValidationEndContext(run_dir=str(self.run_dir), learner_step=step, records=records))
        return records

    # -- the stages -------------------------------------------------------------------------------
    def _backpressure(self) -> bool:
        return self.buffer.size() >= self.buffer.capacity

    async def collect(self) -> None:
        """Keep num_train_games training games in flight until stopped."""
        limit = max(1, self.cfg.collection.num_train_games)
        tasks: set[asyncio.Task[GameResult]] = set()
        drained = self._drained
        try:
            while not self._stop:
                while len(tasks) < limit and not self._backpressure() and not self._stop:
                    tasks.add(asyncio.ensure_future(self.play(self.train_spec())))
                    await asyncio.sleep(0)
                if not tasks:
                    drained.clear()
                    await drained.wait()
                    continue
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    t.result()  # re-raise RunFailed
                del done  # finished games are freed before the next ones start
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    def filter_batch(self, batch: Batch) -> Batch:
        if not self.cfg.training.filter_zero_advantage:
            return batch
        keep = [s for s in batch.steps if s.reward != 0.0]
        dropped = len(batch.steps) - len(keep)
        self.dropped_total += dropped
        return batch.model_copy(update={"steps": keep, "dropped": dropped})

    async def train(self) -> None:
        assert self.learner is not None
        tc = self.cfg.training
        await self.evaluate(0)
        collector = asyncio.ensure_future(self.collect())
        evals: list[asyncio.Task[Any]] = []
        grew, drained = self._grew, self._drained
        try:
            while self.step < tc.learning_steps:
                if collector.done():
                    collector.result()
                    raise RunFailed("collection stopped before training finished")
                if self.buffer.size() < tc.batch_size:
                    grew.clear()
                    await grew.wait()
                    continue
                batch = self.filter_batch(self.buffer.draw(tc.batch_size, self.step))
                drained.set()  # collection may resume
                if not batch.steps:
                    self.empty_batches += 1
                    if self.empty_batches >= tc.max_empty_batches:
                        raise RunFailed(
                            f"{self.empty_batches} batches in a row had only zero-advantage steps (every game a draw or "
                            "every reward equal): the policy may have collapsed. Change the opponents or reward "
                            "transforms, or set training.filter_zero_advantage = false."
                        )
                    continue
                self.empty_batches = 0
                metrics = dict(await self._update(batch))
                self.step += 1
                versions = [s.turn.policy_version for s in batch.steps]
                metrics.update(
                    staleness_mean=self.step - 1 - sum(versions) / len(versions),
                    staleness_max=float(self.step - 1 - min(versions)),
                    batch_steps=float(len(batch.steps)),
                    dropped=float(batch.dropped),
                )
                self.log({"type": "train", "step": self.step, **metrics})
                self.hook.unstable_batch_end(
                    ctx=BatchEndContext(run_dir=str(self.run_dir), learner_step=self.step, metrics=metrics, batch_size=len(batch.steps))
                )
                if self.step % tc.save_every == 0 or self.step == tc.learning_steps:
                    self.save_checkpoint()
                if tc.eval_every and self.step % tc.eval_every == 0 and self.step < tc.learning_steps:
                    evals.append(asyncio.ensure_future(self.evaluate(self.step)))
                await asyncio.sleep(0)
        finally:
            self._stop = True
            drained.set()
            collector.cancel()
            await asyncio.gather(collector, return_exceptions=True)
        for e in evals:
            await e
        await self.evaluate(self.step)

    async def _update(self, batch: Batch) -> dict[str, float]:
        assert self.learner is not None
        if getattr(self.learner, "blocking", False):
            return await asyncio.to_thread(self.learner.update, batch)
        return self.learner.update(batch)

    def save_checkpoint(self) -> None:
        assert self.learner is not None and self.base_ref is not None
        uid = f"ckpt-{self.step}"
        ckpt = self.learner.save_checkpoint(str(self.run_dir / "checkpoints" / uid), uid)
        ref = self.registry.add_checkpoint(ckpt, self.base_ref)
        self.backend(ref.backend).load_checkpoint(ckpt)
        self.registry.write(self.run_dir / "registry.json")
        self.hook.unstable_checkpoint_saved(ctx=CheckpointContext(run_dir=str(self.run_dir), checkpoint=ckpt))

    async def tournament(self) -> None:
        n = self.cfg.collection.tournament_games
        agg = OutcomeAggregator(anchor=None)
        await self.run_pool((self.tournament_spec() for _ in range(n)), self.cfg.collection.num_train_games, agg.add)
        records = agg.records(0)
        for r in records:
            self.log(r)
        self.eval_records += records

    async def run(self) -> RunEndContext:
        status = "completed"
        error = None
        self.write_run_files()
        self.hook.unstable_run_start(ctx=RunStartContext(run_dir=str(self.run_dir), config=self.cfg.model_dump(mode="json"), plugins=self.plugin_records()))
        try:
            if self.learner is not None:
                await self.train()
            else:
                await self.tournament()
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except BaseException as exc:
            status = "failed"
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            end = self.finish(status, error)
        return end

    def finish(self, status: str, error: str | None) -> RunEndContext:
        self._summary(force=True)  # with the final ratings record
        self.registry.write(self.run_dir / "registry.json")
        for fh in self._transcripts.values():
            fh.close()
        for t in self.trackers:
            try:
                t.close()
            except Exception:
                pass
        for b in self._backends.values():
            try:
                b.close()
            except Exception:
                pass
        end = RunEndContext(run_dir=str(self.run_dir), learner_steps=self.step, games_played=self.games_played, status=status, error=error)
        self.hook.unstable_run_end(ctx=end)
        for component in self._subscribed:
            self.system.pm.unregister(component)
        self._subscribed.clear()
        return end


def anchor_seat(game: GameSpec) -> int:
    """The seat a game is reported for: the learner's first seat in a training game, the
    evaluated model's in an evaluation game, seat 0 in a tournament."""
    if game.train_seats:
        return game.train_seats[0]
    for i, r in enumerate(game.seats):
        if r.kind != "fixed":
            return i
    return 0


class CollectionStats:
    """Running totals per (mode, env) of every game played, from the anchor seat's side: what the
    ``summary`` records carry as ``envs`` and the console tracker shows. Nothing is kept per game;
    a windowed rate is the difference of two summaries."""

    FIELDS = ("games", "failed", "win", "draw", "loss", "invalid", "turns")
    _OUTCOME_COLUMN = {"win": 2, "draw": 3, "loss": 4}

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[int]] = {}

    def add(self, result: GameResult) -> None:
        game = result.game
        key = (game.mode, game.env.env_id)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0] * len(self.FIELDS)
        row[0] += 1
        if result.outcome == "failed":
            row[1] += 1
            return
        pid = anchor_seat(game)
        row[self._OUTCOME_COLUMN[result.outcome_for(pid)]] += 1
        if pid < len(result.trajectories) and result.trajectories[pid].made_invalid_move:
            row[5] += 1
        row[6] += result.num_turns

    def snapshot(self) -> dict[str, dict[str, dict[str, float]]]:
        """{mode: {env_id: {games, failed, win_rate, draw_rate, loss_rate, invalid_rate, mean_turns}}};
        rates are over the games that finished."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (mode, env_id), row in sorted(self.rows.items()):
            c = dict(zip(self.FIELDS, row))
            n = c["games"] - c["failed"]
            out.setdefault(mode, {})[env_id] = {
                "games": c["games"],
                "failed": c["failed"],
                "win_rate": c["win"] / n if n else 0.0,
                "draw_rate": c["draw"] / n if n else 0.0,
                "loss_rate": c["loss"] / n if n else 0.0,
                "invalid_rate": c["invalid"] / n if n else 0.0,
                "mean_turns": c["turns"] / n if n else 0.0,
            }
        return out


class OutcomeAggregator:
    """Win/draw/loss, invalid-move and format rates per (env, model, opponent), updated game by
    game so that nothing is kept per game.

    With an ``anchor`` uid (evaluation) only the anchor's seat is counted against the other seat;
    without one (tournament) every seat is counted against every other distinct agent."""

    FIELDS = ("games", "win", "draw", "loss", "invalid", "turns", "format_ok", "failed")
    _OUTCOME_COLUMN = {"win": 1, "draw": 2, "loss": 3}

    def __init__(self, anchor: str | None) -> None:
        self.anchor = anchor
        self.stats: dict[tuple[str, str, str], list[int]] = {}

    def _row(self, key: tuple[str, str, str]) -> list[int]:
        row = self.stats.get(key)
        if row is None:
            row = self.stats[key] = [0] * len(self.FIELDS)
        return row

    def add(self, result: GameResult) -> None:
        seats = result.game.seats
        env_id = result.game.env.env_id
        failed = result.outcome == "failed"
        outcomes = {} if failed else result.outcomes
        for i, s in enumerate(seats):
            uid = s.uid
            if self.anchor is not None and uid != self.anchor:
                continue
            others = {o.uid for o in seats if o.uid != uid} or {uid}
            if failed:
                for opp in others:
                    self._row((env_id, uid, opp))[7] += 1
            else:
                traj = result.trajectories[i]
                turns = traj.turns
                column = self._OUTCOME_COLUMN[outcomes.get(i, "draw")]
                invalid = traj.made_invalid_move
                fmt = 0
                for t in turns:
                    fmt += t.format_ok
                for opp in others:
                    row = self._row((env_id, uid, opp))
                    row[0] += 1
                    row[column] += 1
                    row[4] += invalid
                    row[5] += len(turns)
                    row[6] += fmt
            if self.anchor is not None:
                break  # the evaluated model's first seat only

    def records(self, step: int) -> list[dict[str, Any]]:
        out = []
        for (env_id, uid, opp), row in sorted(self.stats.items()):
            c = dict(zip(self.FIELDS, row))
            n = c["games"]
            out.append({
                "type": "eval", "step": step, "env_id": env_id, "model": uid, "opponent": opp,
                "games": n, "failed": c["failed"],
                "win_rate": c["win"] / n if n else 0.0,
                "draw_rate": c["draw"] / n if n else 0.0,
                "loss_rate": c["loss"] / n if n else 0.0,
                "invalid_rate": c["invalid"] / n if n else 0.0,
                "format_rate": c["format_ok"] / c["turns"] if c["turns"] else 0.0,
            })
        return out
