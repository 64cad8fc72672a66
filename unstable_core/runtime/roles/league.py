"""The league role: model registry, rater, env sampler and model sampler.

It schedules games in batches (training, tournament and evaluation specs), records finished
games (the only owner of match counts and ratings) and registers checkpoints. Components that
subscribed to lifecycle events (the curriculum sampler) get ``unstable_game_end`` and
``unstable_checkpoint_saved`` from here, wherever the league runs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...basemodel import trusted
from ...errors import ComponentError
from ...protocols import LeastExploitableSampler, PopulationMixture
from ...state import load_into, rng_state, set_rng_state, state_of
from ...types import Checkpoint, CheckpointContext, EnvSpec, GameEndContext, GameResult, GameSpec, ModelRef
from ..building import Builder, guarded
from ..plan import RunPlan
from ..seeds import derive_seed, index_seed
from .registry import ModelRegistry, sampler_mixture

if TYPE_CHECKING:  # pragma: no cover
    from ...plugins import PluginSystem


class League:
    def __init__(self, plan: RunPlan, system: PluginSystem) -> None:
        cfg = plan.config
        self.cfg = cfg
        self.run_dir = plan.run_dir
        self.builder = builder = Builder(plan, system)
        self.registry = ModelRegistry()
        for opponent in cfg.opponents:
            self.registry.add(opponent.ref())
        self.base_ref = cfg.model_ref()
        if self.base_ref is not None:
            self.registry.add(self.base_ref, current=True)
        self.env_sampler = builder.build("env_sampler")
        self.model_sampler = builder.build("model_sampler")
        sampler = builder.spec("model_sampler")  # does it read exact payoffs between checkpoints?
        self.exact_payoffs = bool(sampler.exact_payoffs is not None and sampler.exact_payoffs(builder.options("model_sampler")))
        self.least_exploitable = bool(sampler.least_exploitable is not None
                                      and sampler.least_exploitable(builder.options("model_sampler")))
        self.rater = builder.build("rater")
        self.labels = {key: builder.label(key) for key in ("env_sampler", "model_sampler", "rater")}
        self.listeners = builder.listeners
        self.game_idx = 0
        self.in_flight: dict[int, GameSpec] = {}  # scheduled training games not yet recorded
        self.replay: list[GameSpec] = []  # games in flight at a snapshot, played first on resume
        self.evaluated: set[tuple[str, str, str]] = set()
        # one seeded stream for every scheduling draw: games are scheduled in index order, so the
        # draws of game k are determined by the run seed
        self.schedule_rng = random.Random(derive_seed(cfg.seed, "schedule"))
        self.game_seed_key = derive_seed(cfg.seed, "games")
        self.train_envs = list(cfg.train_envs)
        self.env_ids = {e.env_id for e in cfg.train_envs + (cfg.eval_envs or [])}

    # -- scheduling -------------------------------------------------------------------------------
    async def schedule(self, n: int, mode: str) -> list[GameSpec]:
        """The next ``n`` training (``mode="train"``) or tournament games; training games in
        whole groups (``collection.group_size``), so that ``n`` is rounded up to whole groups."""
        make = self._train_group if mode == "train" else (lambda: [self._tournament_spec()])
        cut = min(n, len(self.replay))
        while 0 < cut < len(self.replay) and self.replay[cut].group_id is not None \
                and self.replay[cut].group_id == self.replay[cut - 1].group_id:
            cut += 1  # a group replayed whole
        specs, self.replay = self.replay[:cut], self.replay[cut:]
        while len(specs) < n:
            specs += make()
        if mode == "train":
            self.in_flight.update((s.game_idx, s) for s in specs)
        return specs

    def _sample_env(self, envs: list[EnvSpec]) -> EnvSpec:
        env = guarded(self.labels["env_sampler"], "sample", self.env_sampler.sample, envs, self.schedule_rng)
        if not isinstance(env, EnvSpec):
            raise ComponentError(f"{self.labels['env_sampler']}: sample returned {env!r}; expected one of the configured EnvSpecs")
        if env.env_id not in self.env_ids:
            raise ComponentError(
                f"{self.labels['env_sampler']}: sample returned env {env.env_id!r}, which the config does not list "
                f"(listed: {', '.join(sorted(self.env_ids))})"
            )
        return env

    def _sample_opponents(self, env: EnvSpec, anchor: ModelRef, num_seats: int) -> list[ModelRef]:
        label = self.labels["model_sampler"]
        out = guarded(label, "sample", self.model_sampler.sample, env, anchor, num_seats, self.registry, self.schedule_rng)
        entries = self.registry.entries
        if not isinstance(out, (list, tuple)) or len(out) != num_seats:
            raise ComponentError(f"{label}: sample returned {out!r}; expected a list of {num_seats} ModelRef(s)")
        for ref in out:
            if not isinstance(ref, ModelRef) or ref.uid not in entries:
                raise ComponentError(
                    f"{label}: sample returned {ref!r}; expected a ModelRef of a registered model "
                    f"(registered: {', '.join(entries)})"
                )
        return list(out)

    def _seat(self, env_n: int, anchor: ModelRef, actors: int, opponents: list[ModelRef]) -> tuple[list[ModelRef], list[int]]:
        rng = self.schedule_rng
        positions = [rng.randrange(env_n)] if actors == 1 else sorted(rng.sample(range(env_n), actors))
        it = iter(opponents)
        return [anchor if i in positions else next(it) for i in range(env_n)], positions

    def _train_spec(self) -> GameSpec:
        env = self._sample_env(self.train_envs)
        anchor = self.registry.current
        assert anchor is not None
        actors = max(1, min(env.num_actors, env.num_players))
        opponents = self._sample_opponents(env, anchor, env.num_players - actors)
        seats, positions = self._seat(env.num_players, anchor, actors, opponents)
        return self._spec(env, seats, positions, "train")

    def _train_group(self) -> list[GameSpec]:
        first = self._train_spec()
        size = self.cfg.collection.group_size
        if size == 1:
            return [first]
        branch = self.cfg.collection.branch_turn
        group = [first.model_copy(update={"group_id": first.game_idx, "branch_turn": branch})]
        for k in range(1, size):
            group.append(first.model_copy(update={"game_idx": self.game_idx, "group_id": first.game_idx, "group_index": k,
                                                  "branch_turn": branch}))
            self.game_idx += 1
        return group

    def _tournament_spec(self) -> GameSpec:
        env = self._sample_env(self.train_envs or self.cfg.evaluation_envs)
        anchor = self.schedule_rng.choice(self.registry.fixed())
        opponents = self._sample_opponents(env, anchor, env.num_players - 1)
        seats, _ = self._seat(env.num_players, anchor, 1, opponents)
        return self._spec(env, seats, [], "tournament")

    def _spec(self, env: EnvSpec, seats: list[ModelRef], train_seats: list[int], mode: str) -> GameSpec:
        idx = self.game_idx
        self.game_idx += 1
        data = {
            "game_idx": idx, "seed": index_seed(self.game_seed_key, idx), "env": env, "seats": seats,
            "train_seats": train_seats, "mode": mode, "eval_step": None, "group_id": None, "group_index": 0, "branch_turn": 0,
        }
        if type(env) is not EnvSpec:  # a subclass from a plugin: validated
            return GameSpec.of(data)
        return trusted(GameSpec, data)  # every value checked above

    async def eval_specs(self, step: int) -> tuple[ModelRef | None, list[GameSpec]]:
        """The evaluation games of the current model against every fixed opponent on every
        evaluation env not yet played at this model (the cap: one round per checkpoint)."""
        model = self.registry.current
        if model is None:
            return None, []
        specs = []
        for env in self.cfg.evaluation_envs:
            for opp in self.registry.fixed():
                key = (model.uid, env.env_id, opp.uid)
                if key in self.evaluated:
                    continue
                self.evaluated.add(key)
                for k in range(self.cfg.collection.eval_games):
                    seats = [opp] * env.num_players
                    seats[k % env.num_players] = model
                    idx = self.game_idx
                    self.game_idx += 1
                    specs.append(GameSpec(game_idx=idx, seed=derive_seed(self.cfg.seed, "eval", env.env_id, k), env=env,
                                          seats=seats, mode="eval", eval_step=step))
        return model, specs

    # -- results ----------------------------------------------------------------------------------
    async def record(self, results: list[GameResult]) -> None:
        registry, rater, label = self.registry, self.rater, self.labels["rater"]
        game_end = self.listeners.wants("unstable_game_end")
        for result in results:
            self.in_flight.pop(result.game.game_idx, None)
            if result.outcome != "failed":
                registry.record_game(result)
                guarded(label, "update", rater.update, result, registry)
            if game_end:
                self.listeners.emit("unstable_game_end", GameEndContext(run_dir=self.run_dir, result=result))

    async def add_checkpoint(self, checkpoint: Checkpoint) -> ModelRef:
        """Register a learner checkpoint; it becomes the current model."""
        assert self.base_ref is not None
        ref = self.registry.add_checkpoint(checkpoint, self.base_ref)
        if self.listeners.wants("unstable_checkpoint_saved"):
            self.listeners.emit("unstable_checkpoint_saved", CheckpointContext(run_dir=self.run_dir, checkpoint=checkpoint))
        return ref

    async def population(self) -> list[ModelRef]:
        """The base model and every checkpoint, oldest first."""
        return self.registry.checkpoints()

    async def wants_payoffs(self) -> bool:
        """The model sampler reads exact payoffs between checkpoints (``ModelSamplerSpec.exact_payoffs``)."""
        return self.exact_payoffs

    async def record_payoffs(self, uid: str, payoffs: dict[str, float]) -> None:
        """``uid``'s exact expected reward against each of the others (``exact_payoffs``)."""
        for other, value in payoffs.items():
            self.registry.record_payoff(uid, other, value)

    async def least_exploitable_members(self) -> list[ModelRef]:
        """The models whose least exploitable mixture the model sampler reads now
        (``ModelSamplerSpec.least_exploitable``); [] when it reads none."""
        if not self.least_exploitable:
            return []
        label = self.labels["model_sampler"]
        if not isinstance(self.model_sampler, LeastExploitableSampler):
            raise ComponentError(f"{label} declares least_exploitable but has no least_exploitable_members()")
        uids = guarded(label, "least_exploitable_members", self.model_sampler.least_exploitable_members, self.registry)
        unknown = [uid for uid in uids if uid not in self.registry.entries]
        if unknown:
            raise ComponentError(f"{label}: least_exploitable_members returned {unknown!r}, not models of the registry")
        return [self.registry.get(uid).ref for uid in uids]

    async def record_least_exploitable(self, uids: list[str], weights: list[float]) -> None:
        """The weights of the least exploitable mixture of ``uids`` (``registry.least_exploitable``)."""
        self.registry.record_least_exploitable(uids, weights)

    async def current(self) -> ModelRef | None:
        return self.registry.current

    async def fixed(self) -> list[ModelRef]:
        return self.registry.fixed()

    async def mixtures(self, names: Sequence[str]) -> dict[str, list[tuple[ModelRef, float]]]:
        """The population's mixtures (``collection.eval_mixtures``) as (model, weight) lists:
        'uniform', every checkpoint alike (the base model included); 'meta', the mixture the
        model sampler targets (``PopulationMixture``), when it keeps one."""
        out: dict[str, list[tuple[ModelRef, float]]] = {}
        if "uniform" in names and self.registry.checkpoints():
            pool = self.registry.checkpoints()
            out["uniform"] = [(ref, 1.0 / len(pool)) for ref in pool]
        if "meta" in names and isinstance(self.model_sampler, PopulationMixture):
            weights = guarded(self.labels["model_sampler"], "mixture", sampler_mixture, self.model_sampler, self.registry)
            members = [(self.registry.get(uid).ref, float(w)) for uid, w in dict(weights).items()
                       if w > 0 and uid in self.registry.entries]
            if members:
                out["meta"] = members
        return out

    async def snapshot(self) -> dict[str, Any]:
        """The registry (models, counts, pairs, current) with the rater's numbers and, with a
        sampler that targets a mixture of the population, that mixture (uid -> weight)."""
        snap = self.registry.snapshot()
        snap["ratings"] = guarded(self.labels["rater"], "ratings", self.rater.ratings, self.registry)
        if isinstance(self.model_sampler, PopulationMixture):  # the mixture it targets (psro's meta-game Nash mixture)
            snap["mixture"] = dict(guarded(self.labels["model_sampler"], "mixture", sampler_mixture, self.model_sampler, self.registry))
        return snap

    # -- state ------------------------------------------------------------------------------------
    STATEFUL = ("env_sampler", "model_sampler", "rater")

    async def state_dict(self) -> dict[str, Any]:
        """Registry, counters, the schedule stream, training games in flight (re-played on
        resume) and the state of every Stateful sampler and rater."""
        return {
            "registry": self.registry.state_dict(), "game_idx": self.game_idx, "schedule_rng": rng_state(self.schedule_rng),
            "evaluated": [list(k) for k in sorted(self.evaluated)],
            "in_flight": [s.model_dump(mode="json") for s in [*self.replay, *sorted(self.in_flight.values(), key=lambda s: s.game_idx)]],
            "components": {k: state_of(getattr(self, k)) for k in self.STATEFUL},
        }

    async def load_state_dict(self, state: dict[str, Any]) -> None:
        self.registry.load_state_dict(state["registry"])
        self.game_idx = state["game_idx"]
        set_rng_state(self.schedule_rng, state["schedule_rng"])
        self.evaluated = {tuple(k) for k in state["evaluated"]}
        self.replay = [GameSpec.model_validate(s) for s in state["in_flight"]]
        self.in_flight = {}
        for key in self.STATEFUL:
            load_into(getattr(self, key), state["components"][key])
