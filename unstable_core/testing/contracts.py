"""Conformance classes, one per component kind, and the ``Stateful`` round-trip check."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ..runtime.roles.registry import ModelRegistry
from ..types import (
    Completion,
    EnvSpec,
    GameEndContext,
    GameResult,
    GameSpec,
    GenerationRequest,
    ModelRef,
    PlayerTrajectory,
    Step,
    Turn,
)

# ---------------------------------------------------------------------------------------------
# Conformance kit
# ---------------------------------------------------------------------------------------------


def sample_result(env_id: str = "PickBest-v0", rewards: dict[int, float] | None = None, train_seats: list[int] | None = None,
                  seats: list[ModelRef] | None = None) -> GameResult:
    """A finished two-player game with one turn per player, for component tests."""
    rewards = rewards if rewards is not None else {0: 1.0, 1: -1.0}
    seats = seats or [ModelRef(uid="a", kind="base"), ModelRef(uid="b")]
    trajs = [
        PlayerTrajectory(
            player_id=p, model=seats[p], final_reward=rewards.get(p, 0.0),
            turns=[Turn(player_id=p, index=p, observation="obs", prompt="prompt", completion="\\boxed{C}",
                        completion_token_ids=[2], logprobs=[-1.0], action="[C]", format_ok=True)],
        )
        for p in range(len(seats))
    ]
    spec = GameSpec(game_idx=0, seed=1, env=EnvSpec(env_id=env_id, num_players=len(seats)), seats=seats,
                    train_seats=train_seats if train_seats is not None else [0])
    return GameResult(game=spec, trajectories=trajs, rewards=rewards, num_turns=len(seats))


def check_state_round_trip(make: Any, exercise: Any) -> None:
    """The ``Stateful`` conformance check: a component exercised, its state saved as a snapshot
    saves it (tensors apart, the rest through JSON) and loaded into a fresh component; exercised
    once more, both must then hold the same state and give the same results.

    ``make()`` builds a component; ``exercise(component)`` uses it and returns what it produced."""
    import json

    from ..runtime.rundir.store import join_tensors, split_tensors
    from ..state import Stateful

    first = make()
    assert isinstance(first, Stateful), f"{type(first).__name__} does not implement state_dict/load_state_dict"
    exercise(first)
    tensors: dict[str, Any] = {}
    plain = json.loads(json.dumps(split_tensors(first.state_dict(), tensors)))
    saved = join_tensors(plain, {k: t.clone() for k, t in tensors.items()})  # as read back from disk
    second = make()
    second.load_state_dict(saved)
    assert comparable(exercise(second)) == comparable(exercise(first)), "a restored component behaves differently"
    assert comparable(second.state_dict()) == comparable(first.state_dict()), "a restored component's state differs"


def comparable(value: Any) -> Any:
    """Plain values to compare, as JSON holds them: pydantic models dumped, tensors as lists,
    dict keys as strings."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if type(value).__module__.startswith("torch") and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [comparable(v) for v in value]
    return value


class ComponentContract:
    kind: str = ""
    plugin: Any = None
    name: str = ""
    options: dict[str, Any] = {}
    #: other plugins the test's plugin system loads: (name, plugin) pairs
    other_plugins: tuple[tuple[str, Any], ...] = ()

    @pytest.fixture
    def system(self) -> Any:
        from ..plugins import load_plugins

        extra = [] if self.plugin is None else [(getattr(self.plugin, "__name__", "plugin-under-test"), self.plugin)]
        return load_plugins(builtins=True, entry_points=False, extra=[*extra, *self.other_plugins], strict=True)

    @pytest.fixture
    def spec(self, system: Any) -> Any:
        return system.get(self.kind, self.name)

    @pytest.fixture
    def registry(self) -> ModelRegistry:
        return self.make_registry()

    def make_registry(self) -> ModelRegistry:
        reg = ModelRegistry()
        reg.add(ModelRef(uid="random-valid", model="random-valid"))
        reg.add(ModelRef(uid="greedy", model="greedy"))
        reg.add(ModelRef(uid="base", kind="base", backend="tabular"), current=True)
        return reg

    @pytest.fixture
    def component(self, spec: Any, system: Any, tmp_path: Path) -> Any:
        return build_component_for(self, spec, system, tmp_path)

    def test_record_is_valid(self, spec: Any) -> None:
        from ..components import KINDS

        assert isinstance(spec, KINDS[self.kind].spec)
        assert spec.summary and "\n" not in spec.summary

    def test_options_have_descriptions_and_defaults_validate(self, spec: Any) -> None:
        for fname, field in spec.config.model_fields.items():
            assert field.description, f"option {fname!r} of {self.kind}:{self.name} has no description"
        spec.config.model_validate(dict(self.options))

    def test_options_have_a_json_schema(self, spec: Any) -> None:
        """``unstable config schema`` describes every component's options: a field JSON Schema
        cannot express (a Callable, an arbitrary class) leaves the component undescribed."""
        try:
            spec.config.model_json_schema()
        except Exception as exc:
            pytest.fail(f"{self.kind}:{self.name}: its options model has no JSON Schema: {exc}")

    def test_unknown_option_is_rejected(self, spec: Any) -> None:
        from ..config_check import validate_options
        from ..errors import ConfigError

        extra = spec.config.model_config.get("extra")
        if extra in ("allow", "ignore"):
            pytest.fail(f"{self.kind}:{self.name}: its options model says extra={extra!r}, so a typo in a config passes "
                        "silently; derive it from unstable_core.Options (unknown keys refused)")
        with pytest.raises(ConfigError, match="no_such_option_xyz: unknown option"):
            validate_options(spec, {**self.options, "no_such_option_xyz": 1}, f"{self.kind}:{self.name}", "")

    def test_factory_satisfies_protocol(self, component: Any) -> None:
        from ..components import KINDS

        proto = KINDS[self.kind].protocol
        if proto is not None:
            assert isinstance(component, proto)

    def exercise(self, component: Any) -> Any:
        """Use ``component`` as a run would and return what it produced (the state round trip
        compares these); None where a kind has no such use here."""
        return None

    def test_state_round_trip_when_stateful(self, spec: Any, system: Any, tmp_path: Path) -> None:
        """A Stateful component (its state is saved in run snapshots) restores exactly; one that
        is not Stateful is rebuilt fresh on resume, so it must keep no state worth saving."""
        from ..state import Stateful

        if not isinstance(build_component_for(self, spec, system, tmp_path), Stateful):
            pytest.skip("not Stateful: rebuilt fresh on resume")
        check_state_round_trip(lambda: build_component_for(self, spec, system, tmp_path), self.exercise)


class EnvSamplerContract(ComponentContract):
    kind = "env_sampler"

    def envs(self) -> list[EnvSpec]:
        return [EnvSpec(env_id="TicTacToe-v0"), EnvSpec(env_id="KuhnPoker-v0"), EnvSpec(env_id="PickBest-v0")]

    def test_samples_from_the_given_envs(self, component: Any) -> None:
        envs = self.envs()
        rng = random.Random(0)
        for _ in range(200):
            assert component.sample(envs, rng) in envs

    def test_same_seed_same_choices(self, spec: Any, system: Any, tmp_path: Path) -> None:
        def draws() -> list[str]:
            comp = build_component_for(self, spec, system, tmp_path)
            rng = random.Random(42)
            return [comp.sample(self.envs(), rng).env_id for _ in range(50)]

        assert draws() == draws()

    def exercise(self, sampler: Any) -> Any:
        """Draws, and the game ends a sampler that listens for them (the curriculum) would see."""
        rng = random.Random(3)
        drawn = []
        for i in range(30):
            env = sampler.sample(self.envs(), rng)
            drawn.append(env.env_id)
            if hasattr(sampler, "unstable_game_end"):
                result = sample_result(env_id=env.env_id, rewards={0: float(i % 3 - 1), 1: float(1 - i % 3)})
                sampler.unstable_game_end(GameEndContext(run_dir=".", result=result))
        return drawn


def population_registry(checkpoints: int = 4, games: int = 12, seed: int = 0,
                        fixed: tuple[str, ...] = ("random-valid", "greedy")) -> ModelRegistry:
    """A league's registry some checkpoints into a run: the fixed opponents ``fixed`` (scripted
    agents of those names), the base model, learner checkpoints ``ckpt-1`` ... ``ckpt-N`` (N =
    ``checkpoints``, versions 1..N, the newest current) and ``games`` recorded games between every
    two of them that are not both fixed, each won by the newer model (fixed opponents count as
    oldest) with probability 0.5 + 0.4 x (its age gap) / (N + 1), a draw one time in eight (rewards
    +1 / -1 / 0; a ``random.Random(seed)`` draws them, so equal arguments give equal registries)."""
    from ..types import Checkpoint

    reg = ModelRegistry()
    for name in fixed:
        reg.add(ModelRef(uid=name, model=name))
    base = ModelRef(uid="base", kind="base", backend="tabular")
    reg.add(base, current=True)
    for v in range(1, checkpoints + 1):
        reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"ckpt-{v}"), base)
    rng = random.Random(seed)
    order = [*fixed, *(r.uid for r in reg.checkpoints())]  # oldest first
    for j, newer in enumerate(order):
        for i, older in enumerate(order[:j]):
            if j < len(fixed):
                continue  # two fixed opponents never meet in a run
            p_newer = 0.5 + 0.4 * (j - max(i, len(fixed) - 1)) / (checkpoints + 1)
            seats = [reg.get(newer).ref, reg.get(older).ref]
            for _ in range(games):
                u = rng.random()
                rewards = {0: 0.0, 1: 0.0} if u < 0.125 else {0: 1.0, 1: -1.0} if u < 0.125 + 0.875 * p_newer else {0: -1.0, 1: 1.0}
                reg.record_game(sample_result(seats=seats, rewards=rewards))
    return reg


_GLOBAL_RANDOM = ("random", "uniform", "randint", "randrange", "choice", "choices", "sample", "shuffle", "gauss",
                  "normalvariate", "lognormvariate", "expovariate", "vonmisesvariate", "gammavariate", "betavariate",
                  "paretovariate", "weibullvariate", "triangular", "getrandbits", "randbytes", "binomialvariate")


class ModelSamplerContract(ComponentContract):
    """The model sampler's checks, on a population: ``make_registry()`` (a fresh registry for
    every check) holds, by default, ``population_registry(population_checkpoints,
    population_games)``: the fixed opponents ``random-valid`` and ``greedy``, the base model, that
    many checkpoints (the newest current) and that many games between every two of them. Set the
    two attributes, or override ``make_registry()`` (``population_registry`` is a start), to
    shape it. The checks: every seat gets the registered ``ModelRef`` of a registered model, as
    many as asked, with the current checkpoint or a fixed agent (a tournament's) as anchor; the
    sampler draws from the ``rng`` handed in and nothing else (equal ``rng`` states give equal
    draws whatever the global ``random`` holds; a call to the global ``random`` fails); a
    ``mixture()`` (``PopulationMixture``) names registered models with weights summing to 1; a
    Stateful sampler restores exactly (``exercise``)."""

    kind = "model_sampler"
    #: learner checkpoints in the registry the checks hand the sampler (beside the base model)
    population_checkpoints: int = 4
    #: games recorded between every two models of that registry (not both fixed)
    population_games: int = 12

    def make_registry(self) -> ModelRegistry:
        """The registry every check hands the sampler (a fresh one each time); override to shape it."""
        return population_registry(self.population_checkpoints, self.population_games)

    def draw(self, sampler: Any, env: EnvSpec, anchor: Any, num_seats: int, registry: Any, rng: random.Random) -> Any:
        """``sampler.sample(...)`` with the global ``random``'s functions made to fail."""
        from unittest import mock

        def refuse(name: str) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                raise AssertionError(f"{self.name}: sample called the global random.{name}(); draw from the rng argument "
                                     "(the league's scheduling stream, saved with the run)")
            return call

        patches = [mock.patch.object(random, n, refuse(n)) for n in _GLOBAL_RANDOM if hasattr(random, n)]
        for p in patches:
            p.start()
        try:
            return sampler.sample(env, anchor, num_seats, registry, rng)
        finally:
            for p in reversed(patches):
                p.stop()

    def check_seats(self, out: Any, num_seats: int, registry: Any, call: str) -> None:
        """``out`` is ``num_seats`` registered models, each the registry's own ``ModelRef``."""
        assert isinstance(out, (list, tuple)), f"{call} returned {out!r}; expected a list of {num_seats} ModelRef(s)"
        assert len(out) == num_seats, f"{call} returned {len(out)} seat(s) for {num_seats}: {out!r}"
        for m in out:
            assert isinstance(m, ModelRef), (f"{call} returned {m!r} (a {type(m).__name__}); expected a ModelRef "
                                             "(registry.get(uid).ref, not the uid)")
            assert m.uid in registry.entries, (f"{call} returned model {m.uid!r}, which is not registered "
                                               f"(registered: {', '.join(registry.entries)})")
            assert m == registry.get(m.uid).ref, (f"{call} returned {m!r}, not the registry's {m.uid!r} "
                                                  f"({registry.get(m.uid).ref!r}): seat registry.get(uid).ref")

    def test_fills_every_seat_with_registered_models(self, component: Any, registry: Any) -> None:
        anchors = [registry.current, *registry.fixed()[:1]]
        for num_seats in (1, 2, 3):
            env = EnvSpec(env_id="TicTacToe-v0", num_players=num_seats + 1)
            for anchor in anchors:
                for seed in range(20):
                    out = self.draw(component, env, anchor, num_seats, registry, random.Random(seed))
                    self.check_seats(out, num_seats, registry,
                                     f"{self.name}: sample(anchor={anchor.uid!r}, num_seats={num_seats})")

    def test_draws_only_from_the_rng_it_is_given(self, spec: Any, system: Any, tmp_path: Path) -> None:
        """Two fresh samplers handed equal ``rng`` states draw the same, the global generators
        (``random``'s, numpy's) seeded differently before each; the global ``random``'s functions
        fail when called."""
        try:
            import numpy as np
        except ImportError:  # pragma: no cover - numpy comes with the core's dependencies
            np = None  # type: ignore[assignment]

        def draws(global_seed: int) -> list[list[str]]:
            sampler = build_component_for(self, spec, system, tmp_path)
            registry = self.make_registry()
            env = EnvSpec(env_id="TicTacToe-v0", num_players=3)
            rng = random.Random(11)
            random.seed(global_seed)
            if np is not None:
                np.random.seed(global_seed)
            return [[m.uid for m in sampler.sample(env, registry.current, 2, registry, rng)] for _ in range(60)]

        saved = random.getstate()
        saved_np = np.random.get_state() if np is not None else None
        try:
            first, second = draws(1), draws(2)
        finally:
            random.setstate(saved)
            if np is not None:
                np.random.set_state(saved_np)
        assert first == second, (f"{self.name}: with equal rng states the sampler drew differently once the global "
                                 "random generators were seeded differently: it draws from them, not from the rng argument "
                                 "(the league's scheduling stream, saved with the run)")
        sampler = build_component_for(self, spec, system, tmp_path)
        registry = self.make_registry()
        for seed in range(10):
            self.draw(sampler, EnvSpec(env_id="TicTacToe-v0"), registry.current, 1, registry, random.Random(seed))

    def test_mixture_names_registered_models(self, component: Any, registry: Any) -> None:
        """A sampler that targets a mixture (``PopulationMixture``) gives one of registered models
        after drawing, its weights summing to 1 (or none: {})."""
        from ..protocols import PopulationMixture
        from ..runtime.roles.registry import sampler_mixture

        if not isinstance(component, PopulationMixture):
            pytest.skip("no mixture()")
        rng = random.Random(3)
        for _ in range(30):
            self.draw(component, EnvSpec(env_id="TicTacToe-v0"), registry.current, 1, registry, rng)
        weights = sampler_mixture(component, registry)
        assert isinstance(weights, dict), f"{self.name}: mixture() returned {weights!r}; expected uid -> weight"
        for uid, w in weights.items():
            assert isinstance(uid, str) and uid in registry.entries, (
                f"{self.name}: mixture() names {uid!r}, which is not registered (registered: {', '.join(registry.entries)})")
            assert isinstance(w, (int, float)) and w >= 0, f"{self.name}: mixture() gives {uid!r} the weight {w!r}"
        if weights:
            assert abs(sum(weights.values()) - 1.0) < 1e-6, f"{self.name}: mixture()'s weights sum to {sum(weights.values())}"

    def exercise(self, sampler: Any) -> Any:
        """Draws on the population as the league makes them: each game's result recorded, a new
        checkpoint registered halfway; returns the seats drawn and the mixture, if any."""
        from ..protocols import PopulationMixture
        from ..runtime.roles.registry import sampler_mixture
        from ..types import Checkpoint

        registry = self.make_registry()
        env = EnvSpec(env_id="TicTacToe-v0", num_players=3)
        rng, results = random.Random(5), random.Random(6)
        drawn = []
        for i in range(40):
            if i == 20:
                base = registry.get("base").ref
                version = max(r.version for r in registry.checkpoints()) + 1
                registry.add_checkpoint(Checkpoint(uid=f"ckpt-{version}", version=version, path=f"ckpt-{version}"), base)
            anchor = registry.current
            seats = [anchor, *sampler.sample(env, anchor, 2, registry, rng)]
            drawn.append([m.uid for m in seats])
            win = results.randrange(3)
            registry.record_game(sample_result(seats=seats, rewards={p: 1.0 if p == win else -0.5 for p in range(3)}))
        mixture = sampler_mixture(sampler, registry) if isinstance(sampler, PopulationMixture) else None
        return {"drawn": drawn, "mixture": mixture}


class RaterContract(ComponentContract):
    kind = "rater"

    def test_ratings_cover_players_after_a_game(self, component: Any, registry: Any) -> None:
        seats = [registry.get("base").ref, registry.get("greedy").ref]
        result = sample_result(seats=seats)
        registry.record_game(result)
        component.update(result, registry)
        ratings = component.ratings(registry)
        assert {"base", "greedy"} <= set(ratings)

    def exercise(self, rater: Any) -> Any:
        """Games on a fresh registry: a rater that keeps numbers of its own (beyond the registry,
        which the league saves) continues from them."""
        registry = self.make_registry()
        seats = [registry.get("base").ref, registry.get("greedy").ref]
        for i in range(6):
            result = sample_result(seats=seats, rewards={0: float(i % 3 - 1), 1: float(1 - i % 3)})
            registry.record_game(result)
            rater.update(result, registry)
        return rater.ratings(registry)


class RewardTransformContract(ComponentContract):
    kind = "reward_transform"

    def test_callable_for_its_stage(self, spec: Any, component: Any) -> None:
        result = sample_result()
        if spec.stage == "final":
            out = component(dict(result.rewards), "PickBest-v0")
            assert set(out) == set(result.rewards)
        else:
            step = Step(env_id="PickBest-v0", game_idx=0, player_id=0, turn_index=0, num_turns=1,
                        turn=result.trajectories[0].turns[0], final_reward=1.0, reward=1.0)
            out = component(step) if spec.stage == "step" else component([step, step])
            assert isinstance(out, Step) if spec.stage == "step" else all(isinstance(s, Step) for s in out)


class BufferContract(ComponentContract):
    kind = "buffer"

    def test_add_then_draw_without_replacement(self, component: Any) -> None:
        from ..runtime.roles.rewards import RewardPipelines

        for _ in range(5):
            assert component.add(RewardPipelines().episodes(sample_result(train_seats=[0, 1]))) == 2
        n = component.size()
        assert n == 10
        steps = component.draw(4)
        assert 4 <= len(steps) <= n and all(isinstance(s, Step) for s in steps)
        assert component.size() == n - len(steps)

    def exercise(self, buffer: Any) -> Any:
        from ..runtime.roles.rewards import RewardPipelines

        for _ in range(4):
            buffer.add(RewardPipelines().episodes(sample_result(train_seats=[0, 1])))
        return buffer.draw(3)


class TemplateContract(ComponentContract):
    kind = "template"

    def test_render_and_extract(self, component: Any) -> None:
        prompt = component.render("Available moves: '[4]'")
        assert "Available moves: '[4]'" in prompt
        action, ok = component.extract("I will play \\boxed{4}")
        assert isinstance(action, str) and isinstance(ok, bool)


class InferenceContract(ComponentContract):
    kind = "inference"
    model: ModelRef = ModelRef(uid="m", model="random-valid")

    def test_generate_returns_completion(self, component: Any) -> None:
        import asyncio

        req = GenerationRequest(model=self.model, prompt="Available moves: '[A]', '[B]'", observation="Available moves: '[A]', '[B]'")
        out = asyncio.run(component.generate(req))
        assert isinstance(out, Completion)


class TrackerContract(ComponentContract):
    kind = "tracker"

    def test_log_and_close(self, component: Any) -> None:
        from ..records import TrainRecord

        component.log(TrainRecord(step=1, staleness_mean=0.0, staleness_max=0.0, batch_steps=4.0, loss=0.5))
        component.close()


class EnvProviderContract(ComponentContract):
    kind = "env"

    def test_known_envs_play_to_the_end(self, component: Any) -> None:
        from ..builtin.inference_scripted import agent_random_valid
        from ..builtin.templates import extract_boxed_action

        for env_id in component.known_env_ids()[:3]:
            game = component.make(EnvSpec(env_id=env_id))
            game.reset(num_players=2, seed=0)
            done, turns = False, 0
            while not done and turns < 500:
                _pid, obs = game.observe()
                action, _ = extract_boxed_action(agent_random_valid(obs, random.Random(turns)))
                done, _invalid = game.step(action)
                turns += 1
            rewards, _info = game.close()
            assert done and set(rewards) <= {0, 1}


def build_component_for(contract: ComponentContract, spec: Any, system: Any, tmp_path: Path) -> Any:
    """Build ``spec`` (which a parametrised contract may pick by another name) as a run would."""
    from ..runtime.building import build_component

    return build_component(spec.kind, spec.name, contract.options, plugins=system, run_dir=str(tmp_path))

