"""``LearnerContract``: what every learner must do, checked on the model it trains.

Subclass it, set ``plugin``, ``name``, ``options`` and ``inference`` (the backend that serves the
learner's checkpoints), and give a ``model`` fixture: the ``ModelRef`` of the model being trained
(``unstable_hf.testing.LoraLearnerContract`` does all of this for learners on the hf toolkit and
adds a float64 finite-difference check of the loss gradient)::

    class TestMyLearner(LoraLearnerContract):
        plugin = my_plugin
        name = "my-learner"

The checks: one ``update`` makes exactly one step of each torch optimizer the learner owns and
bumps ``version`` by one; its metrics are finite floats; a saved checkpoint loads in the serving
backend and changes what it serves; learning goes the right way (a two-armed bandit on the
model's own completions: the rewarded arm's share must rise); a ``Stateful`` learner restored
from its state takes the same next update as the original; where the learner's options take
``gradient_checkpointing``, it on gives the update it off gives, and where they take
``data_parallel``, two ranks give the update one learner gives.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ..types import Batch, Checkpoint, GenerationRequest, ModelRef, Step, Turn
from .contracts import ComponentContract, check_state_round_trip


def make_steps(rng: random.Random, token_range: tuple[int, int], games: int = 3, turns: int = 2) -> list[Step]:
    """Whole episodes of a two-player game: every seat of every game, ``turns`` turns each, token
    ids drawn from ``token_range``; final rewards +1/-1 (a draw now and then), a small step
    reward on some turns (so ``reward`` differs from ``final_reward``)."""
    lo, hi = token_range
    steps = []
    for game in range(games):
        finals = {0: 0.0, 1: 0.0} if game % 3 == 2 else ({0: 1.0, 1: -1.0} if rng.random() < 0.5 else {0: -1.0, 1: 1.0})
        for player in (0, 1):
            for t in range(turns):
                prompt = [rng.randrange(lo, hi) for _ in range(rng.randint(2, 6))]
                completion = [rng.randrange(lo, hi) for _ in range(rng.randint(1, 3))]
                turn = Turn(player_id=player, index=2 * t + player, observation="o", prompt="p", prompt_token_ids=prompt,
                            completion="c", completion_token_ids=completion,
                            logprobs=[-rng.uniform(0.5, 3.0) for _ in completion], action="[x]", format_ok=True)
                bonus = -0.5 if rng.random() < 0.25 else 0.0
                steps.append(Step(env_id="Contract-v0", game_idx=game, player_id=player, turn_index=t, num_turns=turns,
                                  turn=turn, final_reward=finals[player], reward=finals[player] + bonus))
    return steps


def _timing(key: str) -> bool:
    return key.endswith("_s")


class LearnerContract(ComponentContract):
    kind = "learner"
    #: inference backend that serves this learner's checkpoints (None: that check is skipped)
    inference: str | None = None
    inference_options: dict[str, Any] = {}
    #: token ids of the contract's batches are drawn from this range (within the model's vocabulary)
    token_range: tuple[int, int] = (0, 4)
    #: steps each torch optimizer takes per update (None: the learner uses no torch optimizer)
    steps_per_optimizer: int | None = 1
    #: updates before a checkpoint must serve different outputs than the base model
    updates_before_checkpoint: int = 2
    prompt: str = "Available moves: '[A]', '[B]', '[C]'"

    @pytest.fixture
    def model(self) -> ModelRef:
        """The model being trained (override: a tiny model built in a temporary folder)."""
        return ModelRef(uid="base", kind="base")

    def make_batch(self, seed: int = 0) -> Batch:
        return Batch(steps=make_steps(random.Random(seed), self.token_range), learner_version=0)

    def build(self, spec: Any, system: Any, tmp_path: Path, model: ModelRef, **options: Any) -> Any:
        from ..runtime.building import build_component

        return build_component(self.kind, spec.name, {**self.options, **options}, plugins=system, run_dir=str(tmp_path),
                               model=model)

    @pytest.fixture
    def component(self, spec: Any, system: Any, tmp_path: Path, model: ModelRef) -> Any:
        return self.build(spec, system, tmp_path, model)

    def exercise(self, learner: Any) -> Any:
        metrics = learner.update(self.make_batch(seed=7))
        return {"version": learner.version, **{k: v for k, v in metrics.items() if not _timing(k)}}

    # -- the checks --------------------------------------------------------------------------------
    def test_one_update_is_one_optimizer_step_and_one_version(self, component: Any) -> None:
        counts: Counter[int] = Counter()
        handle = None
        if self.steps_per_optimizer is not None:
            import torch.optim.optimizer as optim

            handle = optim.register_optimizer_step_post_hook(lambda opt, args, kwargs: counts.update([id(opt)]))
        try:
            before = component.version
            component.update(self.make_batch())
            assert component.version == before + 1, "update must bump version by exactly one"
            if self.steps_per_optimizer is not None:
                assert counts, "update made no optimizer step"
                assert set(counts.values()) == {self.steps_per_optimizer}, f"optimizer steps per update: {dict(counts)}"
            component.update(self.make_batch(seed=1))
            assert component.version == before + 2
        finally:
            if handle is not None:
                handle.remove()

    def test_metrics_are_finite_floats(self, component: Any) -> None:
        metrics = component.update(self.make_batch())
        assert isinstance(metrics, dict) and metrics
        for key, value in metrics.items():
            assert isinstance(key, str) and type(value) is float, f"metric {key!r} is {type(value).__name__}, not float"
            assert math.isfinite(value), f"metric {key!r} is {value}"

    def test_checkpoint_changes_what_the_backend_serves(self, component: Any, model: ModelRef, system: Any,
                                                       tmp_path: Path) -> None:
        from ..runtime.building import build_component
        from ..runtime.roles.registry import checkpoint_ref

        for seed in range(self.updates_before_checkpoint):
            component.update(self.make_batch(seed))
        ckpt = component.save_checkpoint(str(tmp_path / "checkpoints" / "ckpt-1"), "ckpt-1")
        assert isinstance(ckpt, Checkpoint) and ckpt.uid == "ckpt-1" and ckpt.version == component.version
        assert Path(ckpt.path).is_dir()
        if self.inference is None:
            pytest.skip("no serving backend named (set `inference`)")
        backend = build_component("inference", self.inference, self.inference_options, plugins=system,
                                  run_dir=str(tmp_path), model=model)
        try:
            assert backend.load_checkpoint(ckpt) == ckpt.version
            served = checkpoint_ref(ckpt, model)

            def outputs(ref: ModelRef) -> list[tuple[str, list[float]]]:
                requests = [GenerationRequest(model=ref, prompt=self.prompt, observation=self.prompt, seed=s) for s in range(4)]
                return [(c.text, c.logprobs) for c in asyncio.run(_gather(backend, requests))]

            assert outputs(served) != outputs(model), "the checkpoint serves the same outputs as the base model"
        finally:
            backend.close()

    # -- direction: learning must go the right way -------------------------------------------------
    #: on-policy rounds of the direction check, completions sampled a round, the learner options
    #: it uses (over ``options``), and the rise it asks of the rewarded answer: its probability
    #: and its odds against the model's favourite answer must grow by this factor (a backend
    #: that scores completions: exact), or its share of ``direction_probes`` fresh samples by
    #: ``direction_min_share_rise`` (any other backend)
    direction_rounds: int = 6
    direction_samples: int = 32
    direction_options: dict[str, Any] = {}
    direction_min_factor: float = 1.2
    direction_probes: int = 200
    direction_min_share_rise: float = 0.15
    #: the direction batch's steps come in groups of this many (the same prompt: grouped learners)
    direction_group_size: int = 8

    @pytest.fixture
    def direction_model(self, model: ModelRef) -> ModelRef:
        """The model the direction check trains: one whose answers to ``direction_prompt`` fall
        on a few texts (override where ``model`` answers noise)."""
        return model

    def direction_prompt(self, model: ModelRef) -> str:
        """The prompt of the direction check's bandit."""
        return self.prompt

    def direction_steps(self, completions: list[Any], rewards: list[float], round_: int) -> list[Step]:
        """The steps of one round of the direction check, from the model's own completions (token
        ids and logprobs as sampled: ratios are 1 on policy), in groups of ``direction_group_size``
        (the same prompt). Override for a learner that needs a batch of another shape."""
        steps = []
        for i, (c, r) in enumerate(zip(completions, rewards)):
            turn = Turn(player_id=0, observation=c.text, prompt=c.text, prompt_token_ids=c.prompt_token_ids,
                        completion=c.text, completion_token_ids=c.completion_token_ids, logprobs=c.logprobs,
                        policy_version=c.policy_version, action=c.text, format_ok=True)
            game = round_ * len(completions) + i
            group = game - i % self.direction_group_size
            steps.append(Step(env_id="Contract-v0", game_idx=game, player_id=0, turn_index=0, num_turns=1, turn=turn,
                              final_reward=r, reward=r, group_id=group, group_index=game - group))
        return steps

    def test_learning_goes_the_right_way(self, spec: Any, system: Any, tmp_path: Path, direction_model: ModelRef) -> None:
        """A bandit on the model's own answers to one prompt: its second most frequent answer is
        rewarded 1, any other 0, less the batch's mean (the answers' shared tokens get no push).
        After ``direction_rounds`` on-policy updates (each on answers sampled from the latest
        checkpoint) that answer must have become likelier, and likelier against the favourite:
        a learner with its sign flipped, or one that ignores the rewards (it sharpens towards the
        favourite or drifts), fails."""
        from ..runtime.building import build_component
        from ..runtime.roles.registry import checkpoint_ref

        if self.inference is None:
            pytest.skip("no serving backend named (set `inference`)")
        model = direction_model
        learner = self.build(spec, system, tmp_path, model, **self.direction_options)
        backend = build_component("inference", self.inference, self.inference_options, plugins=system,
                                  run_dir=str(tmp_path), model=model)
        scores = system.get("inference", self.inference).scores_completions
        prompt = self.direction_prompt(model)

        def sample(ref: ModelRef, seeds: range) -> list[Any]:
            requests = [GenerationRequest(model=ref, prompt=prompt, observation=prompt, seed=s) for s in seeds]
            completions = asyncio.run(_gather(backend, requests))
            assert all(c.completion_token_ids for c in completions), "the backend gave a completion without token ids"
            return completions

        def measure(ref: ModelRef, texts: list[str]) -> list[float]:
            if scores:
                return list(backend.completion_probabilities(GenerationRequest(model=ref, prompt=prompt, observation=prompt), texts))
            found = [c.text for c in sample(ref, probes)]
            return [found.count(t) / len(found) for t in texts]

        try:
            probes = range(10_000, 10_000 + self.direction_probes)
            ranked = sorted(Counter(c.text for c in sample(model, probes)).items(), key=lambda kv: (-kv[1], kv[0]))
            assert len(ranked) >= 2, f"the model gives one answer only ({ranked[0][0]!r}): no bandit to learn"
            favourite, good = ranked[0][0], ranked[1][0]
            before = measure(model, [good, favourite])
            ref = model
            for r in range(self.direction_rounds):
                completions = sample(ref, range(r * self.direction_samples, (r + 1) * self.direction_samples))
                hits = [1.0 if c.text == good else 0.0 for c in completions]
                mean = sum(hits) / len(hits)
                rewards = [h - mean for h in hits]
                learner.update(Batch(steps=self.direction_steps(completions, rewards, r), learner_version=learner.version))
                uid = f"ckpt-{learner.version}"
                ckpt = learner.save_checkpoint(str(tmp_path / "checkpoints" / uid), uid)
                backend.load_checkpoint(ckpt)
                ref = checkpoint_ref(ckpt, model)
            after = measure(ref, [good, favourite])
        finally:
            backend.close()
        what = (f"the rewarded answer {good!r} (against the favourite {favourite!r}) went from {before[0]:.3f} "
                f"(favourite {before[1]:.3f}) to {after[0]:.3f} (favourite {after[1]:.3f}) after {self.direction_rounds} "
                "updates: the learner does not raise the probability of what is rewarded")
        if scores:
            factor = self.direction_min_factor
            assert after[0] >= factor * before[0], what
            assert after[0] * before[1] >= factor * before[0] * max(after[1], 1e-12), what
        else:
            assert after[0] >= before[0] + self.direction_min_share_rise, what

    # -- options that must not change the update: gradient checkpointing, data-parallel ranks --------
    #: options over ``options`` for the two checks below (``LoraLearnerContract``: float64, so that
    #: Adam's first step, which moves a weight by about lr whatever the size of its gradient, does
    #: not turn float32 rounding into differences), the updates they compare, and their tolerance
    #: on every trained weight
    same_update_options: dict[str, Any] = {}
    same_update_updates: int = 2
    same_update_tolerance: float = 1e-10
    #: options over those for the ranks check (``LoraLearnerContract``: each step a chunk of its
    #: own, so that either side computes on the same shapes)
    ranks_options: dict[str, Any] = {}

    def weights(self, learner: Any) -> dict[str, Any]:
        """The learner's trained weights, name -> tensor (a copy): ``trainable()``'s by default;
        override for a learner without it."""
        return {name: p.detach().clone() for name, p in learner.trainable().items()}

    def updates(self, learner: Any) -> tuple[dict[str, Any], list[dict[str, float]]]:
        """``same_update_updates`` updates on ``make_batch`` batches: the weights after them and
        their metrics; a learner with ``close`` (data-parallel workers) closed."""
        try:
            metrics = [learner.update(self.make_batch(seed=20 + i)) for i in range(self.same_update_updates)]
            return self.weights(learner), metrics
        finally:
            if hasattr(learner, "close"):
                learner.close()

    def assert_same_weights(self, a: dict[str, Any], b: dict[str, Any], what: str) -> None:
        assert a.keys() == b.keys(), f"{what}: different weights {sorted(a.keys() ^ b.keys())}"
        worst = max(((float((a[k].double() - b[k].double()).abs().max()), k) for k in a), default=(0.0, ""))
        assert worst[0] <= self.same_update_tolerance, f"{what}: {worst[1]} differs by {worst[0]:.3g}"

    def test_gradient_checkpointing_gives_the_same_update(self, spec: Any, system: Any, tmp_path: Path, model: ModelRef) -> None:
        """Where the learner's options take ``gradient_checkpointing``: with it on, the updates
        end with the weights they end with off (recomputing activations in backward must not
        change the gradient: a learner that switches adapters between forward and backward, or
        computes something in its forward that the recomputation does not see, fails)."""
        if "gradient_checkpointing" not in spec.config.model_fields:
            pytest.skip("the learner's options have no gradient_checkpointing")
        options = {**self.same_update_options}
        off = self.updates(self.build(spec, system, tmp_path, model, **options, gradient_checkpointing=False))
        on = self.updates(self.build(spec, system, tmp_path, model, **options, gradient_checkpointing=True))
        assert max(float(v.abs().max()) for v in off[0].values()) > 0, "the learner trained no weight"
        self.assert_same_weights(on[0], off[0], "gradient_checkpointing = true")

    def test_two_ranks_give_the_update_of_one_learner(self, spec: Any, system: Any, tmp_path: Path, model: ModelRef) -> None:
        """Where the learner's options take ``data_parallel`` (its ranks): two ranks, each on a
        shard of whole games, end where one learner on the whole batches ends (a statistic taken
        per shard, a loss averaged per shard, fails). The learner class must be importable by
        name (the ranks are spawned processes)."""
        if "data_parallel" not in spec.config.model_fields:
            pytest.skip("the learner's options have no data_parallel")
        options = {**self.same_update_options, **self.ranks_options}
        one = self.updates(self.build(spec, system, tmp_path, model, **options, data_parallel=1))
        two = self.updates(self.build(spec, system, tmp_path, model, **options, data_parallel=2))
        self.assert_same_weights(two[0], one[0], "data_parallel = 2")
        for a, b in zip(one[1], two[1]):
            if "loss" in a:
                assert b["loss"] == pytest.approx(a["loss"], rel=1e-9, abs=1e-12), "data_parallel = 2: the loss differs"

    def test_state_round_trip_when_stateful(self, spec: Any, system: Any, tmp_path: Path, model: ModelRef) -> None:  # type: ignore[override]
        """A restored learner takes the same next update (same metrics, same state)."""
        from ..state import Stateful

        if not isinstance(self.build(spec, system, tmp_path, model), Stateful):
            pytest.skip("not Stateful: a resumed run would restart it from scratch")
        check_state_round_trip(lambda: self.build(spec, system, tmp_path, model), self.exercise)


async def _gather(backend: Any, requests: list[GenerationRequest]) -> list[Any]:
    return list(await asyncio.gather(*(backend.generate(r) for r in requests)))


__all__ = ["LearnerContract", "make_steps"]
