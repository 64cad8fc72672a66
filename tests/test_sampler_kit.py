"""The model sampler kit (``ModelSamplerContract``) fails broken samplers of past checkpoints.

Each broken sampler below draws from the population as a real one would and makes one mistake;
the contract's checks are run on it directly and must fail."""

from __future__ import annotations

import random
from typing import Any

import pytest

from unstable_core import ModelRef, ModelSamplerSpec, NoOptions, hookimpl
from unstable_core.plugins import load_plugins
from unstable_core.testing import ModelSamplerContract, population_registry
from unstable_core.testing.contracts import build_component_for


def past(registry: Any, anchor: ModelRef) -> list[ModelRef]:
    return [r for r in registry.checkpoints() if r.uid != anchor.uid] or [anchor]


class Past:
    """Opponents drawn from the checkpoints before the anchor: correct."""

    def sample(self, env, anchor, num_seats, registry, rng):
        return [rng.choice(past(registry, anchor)) for _ in range(num_seats)]


class UidStrings:
    def sample(self, env, anchor, num_seats, registry, rng):
        return [rng.choice(past(registry, anchor)).uid for _ in range(num_seats)]


class OneSeatShort:
    def sample(self, env, anchor, num_seats, registry, rng):
        return [rng.choice(past(registry, anchor)) for _ in range(max(1, num_seats - 1))]


class Unregistered:
    """Once a population exists, names a checkpoint one past the newest."""

    def sample(self, env, anchor, num_seats, registry, rng):
        pool = past(registry, anchor)
        if len(pool) < 3:
            return [rng.choice(pool) for _ in range(num_seats)]
        newest = registry.checkpoints()[-1]
        ghost = newest.model_copy(update={"uid": f"ckpt-{newest.version + 1}", "version": newest.version + 1})
        return [ghost, *(rng.choice(pool) for _ in range(num_seats - 1))]


class GlobalRandom:
    def sample(self, env, anchor, num_seats, registry, rng):
        return [random.choice(past(registry, anchor)) for _ in range(num_seats)]


class ImportedChoice:
    """``from random import choice``: the global generator, out of reach of a patched module."""

    _choice = staticmethod(random.choice)

    def sample(self, env, anchor, num_seats, registry, rng):
        return [self._choice(past(registry, anchor)) for _ in range(num_seats)]


class WinRate:
    """Opponents weighted by how often they beat the anchor, with a mixture that reads the
    registry (``mixture(registry)``)."""

    def weights(self, registry, anchor):
        pool = past(registry, anchor)
        return pool, [registry.head_to_head(r.uid, anchor.uid)[0] + 1.0 for r in pool]

    def sample(self, env, anchor, num_seats, registry, rng):
        pool, weights = self.weights(registry, anchor)
        return rng.choices(pool, weights=weights, k=num_seats)

    def mixture(self, registry=None):
        if registry is None:
            return {}
        pool, weights = self.weights(registry, registry.current)
        return {r.uid: w / sum(weights) for r, w in zip(pool, weights, strict=True)}


class BadMixture(Past):
    def mixture(self, registry=None):
        return {"ckpt-99": 1.0}


SAMPLERS = {"past": Past, "uid-strings": UidStrings, "one-seat-short": OneSeatShort, "unregistered": Unregistered,
            "global-random": GlobalRandom, "imported-choice": ImportedChoice, "win-rate": WinRate, "bad-mixture": BadMixture}


class Plugin:
    @hookimpl
    def unstable_model_samplers(self):
        return [ModelSamplerSpec(name=name, summary=f"kit test sampler {name}", config=NoOptions,
                                 factory=lambda options, ctx, cls=cls: cls())
                for name, cls in SAMPLERS.items()]


plugin = Plugin()


class TestPastPasses(ModelSamplerContract):
    """A correct sampler of past checkpoints passes the whole contract."""

    plugin = plugin
    name = "past"


class TestWinRatePasses(ModelSamplerContract):
    plugin = plugin
    name = "win-rate"


CHECKS = ["test_fills_every_seat_with_registered_models", "test_draws_only_from_the_rng_it_is_given",
          "test_mixture_names_registered_models"]


def run_check(name: str, check: str, tmp_path) -> None:
    """One of the contract's checks on sampler ``name``, called as pytest would call it."""
    contract = type("Kit", (ModelSamplerContract,), {"plugin": plugin, "name": name})()
    system = load_plugins(builtins=True, entry_points=False, extra=[("kit", plugin)], strict=True)
    spec = system.get("model_sampler", name)
    kwargs = {"component": build_component_for(contract, spec, system, tmp_path), "registry": contract.make_registry(),
              "spec": spec, "system": system, "tmp_path": tmp_path}
    method = getattr(contract, check)
    import inspect

    method(**{k: v for k, v in kwargs.items() if k in inspect.signature(method).parameters})


@pytest.mark.parametrize("check", CHECKS)
def test_a_correct_sampler_passes_each_check(check, tmp_path):
    run_check("past", check, tmp_path)
    run_check("win-rate", check, tmp_path)


@pytest.mark.parametrize(("name", "check", "message"), [
    ("uid-strings", "test_fills_every_seat_with_registered_models", "expected a ModelRef"),
    ("one-seat-short", "test_fills_every_seat_with_registered_models", "seat"),
    ("unregistered", "test_fills_every_seat_with_registered_models", "not registered"),
    ("global-random", "test_draws_only_from_the_rng_it_is_given", "global"),
    ("imported-choice", "test_draws_only_from_the_rng_it_is_given", "global"),
    ("bad-mixture", "test_mixture_names_registered_models", "not registered"),
])
def test_the_kit_fails_a_broken_sampler(name, check, message, tmp_path):
    with pytest.raises(AssertionError, match=message):
        run_check(name, check, tmp_path)


def test_the_population_registry_holds_checkpoints_with_pair_results():
    reg = population_registry(checkpoints=3, games=5)
    assert [r.uid for r in reg.checkpoints()] == ["base", "ckpt-1", "ckpt-2", "ckpt-3"]
    assert reg.current.uid == "ckpt-3" and [r.uid for r in reg.fixed()] == ["random-valid", "greedy"]
    uids = list(reg.entries)
    for i, a in enumerate(uids):
        for b in uids[i + 1:]:
            if reg.get(a).ref.kind == "fixed" and reg.get(b).ref.kind == "fixed":
                assert reg.match_count(a, b) == 0
            else:
                assert reg.match_count(a, b) == 5 and sum(reg.head_to_head(a, b)) == 5
    # the newer checkpoint beats the older more often than not: results differ pair to pair
    assert reg.head_to_head("ckpt-3", "base")[0] > reg.head_to_head("ckpt-3", "base")[2]
    assert population_registry(checkpoints=3, games=5).state_dict() == reg.state_dict()


class TestShapedRegistry(ModelSamplerContract):
    """An author shapes the population through the documented attributes."""

    plugin = plugin
    name = "past"
    population_checkpoints = 7
    population_games = 3

    def test_the_registry_is_shaped(self, registry):
        assert registry.current.uid == "ckpt-7" and registry.match_count("ckpt-7", "base") == 3


class OldMixture(Past):
    def mixture(self):
        return {"base": 1.0}


def test_a_mixture_that_takes_the_registry_is_handed_it():
    from unstable_core.runtime.roles.registry import sampler_mixture

    reg = population_registry(checkpoints=2, games=6)
    wins = {uid: reg.head_to_head(uid, "ckpt-2")[0] + 1.0 for uid in ("base", "ckpt-1")}
    assert sampler_mixture(WinRate(), reg) == pytest.approx({uid: w / sum(wins.values()) for uid, w in wins.items()})
    assert sampler_mixture(OldMixture(), reg) == {"base": 1.0}  # mixture() without one: called as before


def test_a_run_writes_the_mixture_its_sampler_computes_from_the_registry(make_plugin_system, tmp_path):
    import json

    import unstable_core
    from unstable_core.testing import toy_config, toy_plugin

    system = make_plugin_system(toy_plugin, plugin)
    cfg = toy_config(model_sampler={"name": "win-rate"}, collection={"num_train_games": 8, "num_eval_games": 8, "eval_games": 8},
                     training={"learning_steps": 4, "batch_size": 8, "save_every": 2, "eval_every": 4})
    unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system, quiet=True)
    registry = json.loads((tmp_path / "r" / "registry.json").read_text())
    assert registry["mixture"] and set(registry["mixture"]) <= {m["uid"] for m in registry["models"]}
    assert sum(registry["mixture"].values()) == pytest.approx(1.0)


def test_win_rates_pool_a_checkpoints_lineage_and_prior_pseudo_games():
    from unstable_core import Checkpoint
    from unstable_core.runtime.roles.registry import ModelRegistry
    from unstable_core.testing import sample_result

    reg = ModelRegistry()
    reg.add(ModelRef(uid="greedy", model="greedy"))
    base = ModelRef(uid="base", kind="base", backend="tabular")
    reg.add(base, current=True)
    for v in (1, 2, 3):
        reg.add_checkpoint(Checkpoint(uid=f"ckpt-{v}", version=v, path=f"c{v}"), base)

    def play(a, b, rewards):
        reg.record_game(sample_result(seats=[reg.get(a).ref, reg.get(b).ref], rewards={0: rewards[0], 1: rewards[1]}))

    win, draw, loss = (1.0, -1.0), (0.0, 0.0), (-1.0, 1.0)
    for r in (win, win, win, loss):
        play("ckpt-1", "greedy", r)
    for r in (win, win, draw, draw):
        play("greedy", "ckpt-2", r)  # seated the other way round: 2 losses and 2 draws for ckpt-2
    play("ckpt-3", "greedy", win)
    play("ckpt-3", "ckpt-2", win)

    assert reg.lineage("ckpt-3", 2) == ["ckpt-3", "ckpt-2", "ckpt-1"] and reg.lineage("ckpt-1", 5) == ["ckpt-1", "base"]
    assert reg.lineage("greedy", 3) == ["greedy"] and reg.lineage("ckpt-3") == ["ckpt-3"]
    # by hand: ckpt-3's own single game, then with prior pseudo-games, then pooled back over its lineage
    assert reg.win_rate("ckpt-3", "greedy") == 1.0
    assert reg.win_rate("ckpt-3", "greedy", prior=2) == pytest.approx((1 + 1) / (1 + 2))
    assert reg.win_rate("ckpt-3", "greedy", lineage=1) == pytest.approx((1 + 0 + 2 / 2) / 5)
    assert reg.win_rate("ckpt-3", "greedy", lineage=2, prior=1) == pytest.approx((1 + 3 + 2 / 2 + 0.5) / (9 + 1))
    assert reg.win_rate("greedy", "ckpt-3", lineage=2) == 0.0  # a fixed opponent's lineage is itself
    # ckpt-2 is the opponent here, so its own games never count as ckpt-3's predecessor's
    assert reg.win_rate("ckpt-3", "ckpt-2", lineage=2) == 1.0
    assert reg.win_rate("base", "greedy") is None and reg.win_rate("base", "greedy", prior=4) == 0.5
