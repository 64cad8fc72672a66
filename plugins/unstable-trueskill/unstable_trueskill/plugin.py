"""TrueSkill rater, rating-aware model samplers and the `unstable ratings` command.

Ratings live in each registry entry's ``rating`` dict (``mu``, ``sigma``, ``conservative`` =
mu - 3 sigma, and ``mu@ENV`` / ``sigma@ENV`` with ``per_env``), so the samplers read them from the
registry and work with any rater that writes ``mu`` and ``sigma``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unstable_core import EnvSpec, GameResult, ModelRef, ModelSamplerSpec, RaterSpec, hookimpl

DEFAULT_MU = 25.0
DEFAULT_SIGMA = 25.0 / 3


class TrueSkillOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mu: float = Field(DEFAULT_MU, description="Initial mean.")
    sigma: float = Field(DEFAULT_SIGMA, gt=0, description="Initial standard deviation.")
    beta: float = Field(4.0, gt=0, description="Skill-difference scale (UnstableBaselines: 4.0).")
    tau: float = Field(DEFAULT_SIGMA / 100, ge=0, description="Dynamics factor added to sigma before each game.")
    draw_probability: float = Field(0.10, ge=0, lt=1, description="Prior probability of a draw.")
    checkpoint_sigma_factor: float = Field(
        2.0, ge=1, description="A new checkpoint starts at the previous checkpoint's mu with sigma x this (capped at the initial sigma)."
    )
    per_env: bool = Field(False, description="Also keep separate ratings per env (mu@ENV, sigma@ENV).")


def start_rating(uid: str, registry: Any, rated: Callable[[str], tuple[float, float] | None],
                 options: TrueSkillOptions) -> tuple[float, float]:
    """(mu, sigma) the rater gives ``uid`` at its first game: a checkpoint starts at the mu of the
    latest earlier snapshot already rated (the base model has version 0) with that one's sigma x
    ``checkpoint_sigma_factor`` (capped at the initial sigma); any other model, and a checkpoint
    with no rated predecessor, at the initial (mu, sigma). ``rated(uid)`` is a model's rating, or
    None before its first game. The samplers score a model not rated yet with the same function."""
    entry = registry.entries.get(uid) if registry is not None else None
    if entry is not None and entry.ref.kind == "checkpoint":
        older = [r for r in registry.checkpoints() if r.version < entry.ref.version and rated(r.uid) is not None]
        if older:
            prev = rated(max(older, key=lambda r: (r.version, r.kind != "base")).uid)
            assert prev is not None
            return prev[0], min(prev[1] * options.checkpoint_sigma_factor, options.sigma)
    return options.mu, options.sigma


class TrueSkillRater:
    def __init__(self, options: TrueSkillOptions) -> None:
        import trueskill

        self.options = options
        self.env = trueskill.TrueSkill(
            mu=options.mu, sigma=options.sigma, beta=options.beta, tau=options.tau,
            draw_probability=options.draw_probability, backend=None,
        )
        self.table: dict[str, Any] = {}  # key ("uid" or "uid@env") -> trueskill.Rating

    # -- initial ratings ----------------------------------------------------------------------------
    def _initial(self, uid: str, registry: Any, suffix: str) -> Any:
        def rated(other: str) -> tuple[float, float] | None:
            r = self.table.get(other + suffix)
            return None if r is None else (r.mu, r.sigma)

        mu, sigma = start_rating(uid, registry, rated, self.options)
        return self.env.create_rating(mu=mu, sigma=sigma)

    def rating(self, uid: str, registry: Any = None, env_id: str | None = None) -> Any:
        key = uid if env_id is None else f"{uid}@{env_id}"
        if key not in self.table:
            self.table[key] = self._initial(uid, registry, "" if env_id is None else f"@{env_id}")
        return self.table[key]

    # -- updates ------------------------------------------------------------------------------------
    def _rate(self, uids: list[str], rewards: list[float], registry: Any, env_id: str | None) -> None:
        suffix = "" if env_id is None else f"@{env_id}"
        if len(uids) == 1:  # a single player against an environment dummy
            dummy = f"env:{env_id or 'any'}"
            uids, rewards = [uids[0], dummy], [rewards[0], 0.0]
        # a model in several seats (self-play) is rated once, at its best seat's reward
        best: dict[str, float] = {}
        for u, r in zip(uids, rewards):
            best[u] = max(best.get(u, -math.inf), r)
        if len(best) < 2:
            return
        teams = [(self.rating(u, registry, env_id),) for u in best]
        order = sorted(set(best.values()), reverse=True)
        ranks = [order.index(r) for r in best.values()]  # equal rewards: equal ranks (a draw)
        new = self.env.rate(teams, ranks=ranks)
        for u, (r,) in zip(best, new):
            self.table[u + suffix] = r

    def update(self, result: GameResult, registry: Any) -> None:
        if result.outcome == "failed":
            return
        uids = [s.uid for s in result.game.seats]
        rewards = [result.rewards.get(i, 0.0) for i in range(len(uids))]
        self._rate(uids, rewards, registry, None)
        if self.options.per_env:
            self._rate(uids, rewards, registry, result.game.env.env_id)
        for uid in set(uids):
            entry = registry.entries.get(uid)
            if entry is None:
                continue
            r = self.rating(uid, registry)
            entry.rating.update(mu=r.mu, sigma=r.sigma, conservative=r.mu - 3 * r.sigma)
            if self.options.per_env:
                e = self.rating(uid, registry, result.game.env.env_id)
                entry.rating.update({f"mu@{result.game.env.env_id}": e.mu, f"sigma@{result.game.env.env_id}": e.sigma})

    def ratings(self, registry: Any) -> dict[str, dict[str, float]]:
        return {uid: dict(e.rating) for uid, e in registry.entries.items()}

    # -- state (Stateful): the table holds more than the registry shows (env dummies, per-env keys)
    def state_dict(self) -> dict[str, Any]:
        return {"table": {key: [r.mu, r.sigma] for key, r in self.table.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.table = {key: self.env.create_rating(mu=mu, sigma=sigma) for key, (mu, sigma) in state["table"].items()}


# -- samplers ---------------------------------------------------------------------------------------


class SamplerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(1.0, gt=0, description="Softmax temperature (lower: sharper).")
    max_active: int | None = Field(8, ge=1, description="Only the last N checkpoints stay active as opponents (None: all).")
    include_anchor: bool = Field(False, description="Allow the anchor itself as an opponent (self-play).")
    beta: float = Field(4.0, gt=0, description="beta of the TrueSkill environment used for match quality.")


def registry_rating(registry: Any, uid: str) -> tuple[float, float] | None:
    """(mu, sigma) a rater wrote into ``uid``'s registry entry, or None before its first game."""
    entry = registry.entries.get(uid)
    if entry is None or "mu" not in entry.rating:
        return None
    return float(entry.rating["mu"]), float(entry.rating.get("sigma", DEFAULT_SIGMA))


def rater_options(config: Any) -> TrueSkillOptions:
    """The options of the run's ``trueskill`` rater (``config``: the resolved run config), or its
    defaults when the run rates with another rater."""
    choice = dict(config.get("rater") or {}) if isinstance(config, dict) else {}
    if choice.pop("name", None) != "trueskill":
        return TrueSkillOptions()
    return TrueSkillOptions.model_validate(choice)


def softmax(scores: list[float], temperature: float) -> list[float]:
    m = max(scores)
    e = [math.exp((s - m) / temperature) for s in scores]
    total = sum(e)
    return [x / total for x in e]


class RatingSampler:
    """Softmax over a score of each candidate against the anchor."""

    def __init__(self, options: SamplerOptions, score: str, rater: TrueSkillOptions | None = None) -> None:
        import trueskill

        self.options = options
        self.score_kind = score
        self.env = trueskill.TrueSkill(beta=options.beta, backend=None)
        self.rater = rater or TrueSkillOptions()  # the rater's options: where a model not rated yet starts

    def rating(self, registry: Any, uid: str) -> tuple[float, float]:
        """``uid``'s (mu, sigma): its rating, or, before its first game, the one the rater will
        start it at (``start_rating``: a new checkpoint at the previous one's mu)."""
        rated = registry_rating(registry, uid)
        if rated is not None:
            return rated
        return start_rating(uid, registry, lambda other: registry_rating(registry, other), self.rater)

    def candidates(self, anchor: ModelRef, registry: Any) -> list[ModelRef]:
        """Fixed opponents and the last ``max_active`` active checkpoints (read only: a sampler
        never changes the registry it is shown)."""
        active = registry.active_checkpoints(self.options.max_active)
        pool = registry.fixed() + active
        out = [r for r in pool if self.options.include_anchor or r.uid != anchor.uid]
        return out or [anchor]

    def score(self, anchor: ModelRef, other: ModelRef, registry: Any) -> float:
        am, asg = self.rating(registry, anchor.uid)
        om, osg = self.rating(registry, other.uid)
        if self.score_kind == "match-quality":
            return self.env.quality_1vs1(self.env.create_rating(am, asg), self.env.create_rating(om, osg))
        return -abs(am - om)

    def probabilities(self, anchor: ModelRef, registry: Any) -> tuple[list[ModelRef], list[float]]:
        cands = self.candidates(anchor, registry)
        return cands, softmax([self.score(anchor, c, registry) for c in cands], self.options.temperature)

    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        cands, probs = self.probabilities(anchor, registry)
        return rng.choices(cands, weights=probs, k=num_seats)


@hookimpl
def unstable_raters() -> list[RaterSpec]:
    return [RaterSpec(name="trueskill", summary="TrueSkill ratings (trueskill library): mu, sigma, per-env option",
                      config=TrueSkillOptions, factory=lambda o, ctx: TrueSkillRater(o))]


@hookimpl
def unstable_model_samplers() -> list[ModelSamplerSpec]:
    def make(kind: str) -> Any:
        return lambda options, ctx: RatingSampler(options, kind, rater=rater_options(ctx.config))

    return [
        ModelSamplerSpec(name="match-quality", summary="Softmax over TrueSkill match quality with the anchor",
                         config=SamplerOptions, factory=make("match-quality")),
        ModelSamplerSpec(name="ts-dist", summary="Softmax over minus the distance between TrueSkill mus",
                         config=SamplerOptions, factory=make("ts-dist")),
    ]


@hookimpl
def unstable_register_commands(cli: Any) -> None:
    import click

    @cli.command(short_help="TrueSkill leaderboard of a run.")
    @click.argument("run_dir", type=click.Path(file_okay=False))
    @click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
    @click.option("--heatmap", type=click.Path(dir_okay=False), default=None, help="Write the match-count heatmap (PNG).")
    def ratings(run_dir: str, as_json: bool, heatmap: str | None) -> None:
        """Leaderboard of a run: uid, mu, sigma, mu - 3 sigma, games, wins, draws, losses.

        A model without a TrueSkill rating shows "-" (JSON: null), never the prior; a run rated by
        another rater (`wins`, `elo`) is said so on stderr and listed by its score.

        \b
        Example: unstable ratings runs/trueskill-tournament-20261126-101500 --heatmap matches.png
        """
        from .leaderboard import draw_heatmap, leaderboard, load_snapshot, print_table, unrated_note

        snap = load_snapshot(run_dir)
        rows = leaderboard(snap)
        note = unrated_note(run_dir, rows)
        if note:
            click.echo(note, err=True)
        if as_json:
            import json

            click.echo(json.dumps(rows, indent=2))
        else:
            print_table(rows)
        if heatmap:
            draw_heatmap(snap, heatmap)
            click.echo(f"heatmap written to {heatmap}", err=True)

