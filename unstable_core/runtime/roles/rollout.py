"""The rollout role: env providers, templates, inference backends and the game runner.

``play(specs)`` plays a batch of games concurrently on one event loop, so that a batching
backend serves every game in flight together (in sync mode in turn rounds, ``lockstep.py``); ``set_policy(checkpoint)`` hands a new checkpoint
to the backend of the model being trained, which confirms the version it now serves.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ...builtin.templates import boxed_answer
from ...config import env_provider_of
from ...errors import PluginError, RunFailed
from ...protocols import ActionProbabilities, ExactPayoffs, LeastExploitable, MixtureMetrics, PolicyMetrics
from ...types import Checkpoint, EnvSpec, GameResult, GameSpec, GenerationRequest, ModelRef
from ..building import Builder, guarded
from ..game.eager import eager
from ..game.envcalls import EnvCalls
from ..game.envs import EnvProviders
from ..game.lockstep import Lockstep
from ..game.runner import GameRunner
from ..plan import RunPlan

if TYPE_CHECKING:  # pragma: no cover
    from ...plugins import PluginSystem


class Rollout:
    def __init__(self, plan: RunPlan, system: PluginSystem) -> None:
        cfg = plan.config
        self.builder = builder = Builder(plan, system)
        self.trained_backend = cfg.inference.name
        self.default_env = cfg.env.name
        providers = {cfg.env.name: builder.build("env")}
        providers |= {name: builder.build(f"env_providers.{name}") for name in cfg.env_provider_names()}
        self.env_providers = EnvProviders(cfg.env.name, providers)
        self._templates: dict[str, Any] = {}
        self._backends: dict[str, Any] = {}
        self._at_once: dict[str, bool] = {}  # backend name -> its spec's answers_at_once
        self._choosing: dict[str, bool] = {}  # backend name -> its spec's answers_choices
        self._games: set[asyncio.Future[GameResult]] = set()  # games that suspended, until they end
        self._scored: dict[tuple[Any, ...], list[float]] = {}  # action probabilities a model's backend gave
        collection = cfg.collection
        self.env_calls = EnvCalls(collection.env_calls, collection.slow_env_call_ms / 1000)
        self.lockstep = Lockstep() if collection.mode == "sync" else None
        self.runner = GameRunner(
            self.env_providers, self.template, self.backend, collection.max_turns, collection.max_action_chars, self.env_calls,
            self.lockstep, collection.request_timeout_s, lambda name: self._at_once.get(name, False),
            lambda name: collection.answers == "choice" and self._choosing.get(name, False),
        )
        # build every backend a seat can name now: a broken one fails before the first game
        base = cfg.model_ref()
        for ref in [o.ref() for o in cfg.opponents] + ([base] if base is not None else []):
            self.backend(ref.backend)

    def template(self, name: str) -> Any:
        template = self._templates.get(name)
        if template is None:
            template = self._templates[name] = self.builder.named("template", name)
        return template

    def backend(self, name: str) -> Any:
        backend = self._backends.get(name)
        if backend is None:
            key = "inference" if name == self.trained_backend else f"backends.{name}"
            backend = self._backends[name] = self.builder.build(key)
            self._at_once[name] = self.builder.spec(key).answers_at_once
            self._choosing[name] = self.builder.spec(key).answers_choices
        return backend

    async def play(self, specs: list[GameSpec]) -> list[GameResult]:
        """Play the games concurrently; a game that raises fails with its reason, never the batch.

        Each game is a task of its own, started in order, so that a batching backend gets every
        game's first request before it answers any. A game whose seats are all served by backends
        that answer at once (``InferenceSpec.answers_at_once``: scripted agents) is played inline
        instead, at once, and needs no task unless it waits for something (an env call on a
        worker thread, a turn round): ``eager.py``."""
        if not specs:
            return []
        if self.lockstep is not None:
            self.lockstep.expect(len(specs))
        loop = asyncio.get_running_loop()
        at_once = self._at_once
        games = [
            eager(self._play(spec)) if all(at_once.get(ref.backend, False) for ref in spec.seats) else loop.create_task(self._play(spec))
            for spec in specs
        ]
        waiting = [game for game in games if not game.done()]
        if not waiting:
            return [game.result() for game in games]
        self._games.update(waiting)
        try:
            await asyncio.gather(*waiting)
            return [game.result() for game in games]
        finally:
            self._games.difference_update(waiting)
            for game in waiting:  # the batch was cancelled (the run stops) or a game raised: the rest stop too
                game.cancel()

    async def _play(self, spec: GameSpec) -> GameResult:
        try:
            return await self.runner.play(spec)
        finally:
            if self.lockstep is not None:
                self.lockstep.leave()

    async def set_policy(self, checkpoint: Checkpoint) -> int:
        """Load a new checkpoint in the trained model's backend; return the version it serves."""
        backend = self.backend(self.trained_backend)
        label = self.builder.label("inference")
        served = await asyncio.to_thread(guarded, label, "load_checkpoint", backend.load_checkpoint, checkpoint)  # may load weights
        if served != checkpoint.version:
            raise RunFailed(
                f"{label}: after load_checkpoint({checkpoint.uid!r}) it serves version {served!r}, not {checkpoint.version}"
            )
        return served

    async def sleep(self) -> None:
        """Hand the trained model's backend's accelerator memory back (``training.colocate``,
        before an update; the config check made sure it declares ``releases_memory``)."""
        backend = self.backend(self.trained_backend)
        await asyncio.to_thread(guarded, self.builder.label("inference"), "sleep", backend.sleep)

    async def wake(self) -> None:
        """Take the memory back after the update: the backend serves again."""
        backend = self.backend(self.trained_backend)
        await asyncio.to_thread(guarded, self.builder.label("inference"), "wake", backend.wake)

    async def policy_metrics(self, model: ModelRef, env: EnvSpec) -> dict[str, float]:
        """The exact policy metrics ``env``'s provider offers for ``model`` (e.g. exploitability),
        from the probability the model's backend gives each legal action's answer (the built-in
        templates' answer form, ``\\boxed{label}``); nothing when the provider offers none or
        the backend scores no completions. Computed in a worker thread: games go on."""
        provider = self.metrics_provider(env, [model])
        if provider is None:
            return {}
        metrics = await asyncio.to_thread(guarded, self.provider_label(env), "policy_metrics", provider.policy_metrics,
                                          env, self.action_probabilities(model, env))
        return {str(k): float(v) for k, v in dict(metrics).items()}

    async def mixture_metrics(self, members: list[tuple[ModelRef, float]], env: EnvSpec) -> dict[str, float]:
        """The same for the mixture that draws one of ``members`` per game with its weight
        (``collection.eval_mixtures``); nothing when the provider scores no mixtures. Each
        model's answers are scored once a run (a checkpoint never changes)."""
        provider = self.metrics_provider(env, [ref for ref, _ in members])
        if provider is None or not members or not isinstance(provider, MixtureMetrics):
            return {}
        total = sum(w for _, w in members)
        scored = [(w / total, self.action_probabilities(ref, env)) for ref, w in members]
        metrics = await asyncio.to_thread(guarded, self.provider_label(env), "mixture_metrics", provider.mixture_metrics,
                                          env, scored)
        return {str(k): float(v) for k, v in dict(metrics).items()}

    async def expected_payoffs(self, row: ModelRef, columns: list[ModelRef], envs: list[EnvSpec]) -> list[float]:
        """``row``'s exact expected reward against each of ``columns``, the mean over ``envs``
        (a model sampler's ``exact_payoffs``; the config check made sure their providers offer
        them). Computed in a worker thread: games go on."""
        totals = [0.0] * len(columns)
        for env in envs:
            provider = self.metrics_provider(env, [row, *columns])
            if not isinstance(provider, ExactPayoffs):
                raise PluginError(f"{self.provider_label(env)} offers no expected_payoffs() (the ExactPayoffs protocol)")
            found = await asyncio.to_thread(guarded, self.provider_label(env), "expected_payoffs", provider.expected_payoffs, env,
                                            self.action_probabilities(row, env), [self.action_probabilities(c, env) for c in columns])
            totals = [t + float(v) for t, v in zip(totals, found, strict=True)]
        return [t / max(len(envs), 1) for t in totals]

    async def least_exploitable_mixture(self, members: list[ModelRef], env: EnvSpec) -> list[float]:
        """The weights of the least exploitable mixture of ``members`` on ``env`` (a model
        sampler's ``least_exploitable``). Computed in a worker thread: games go on."""
        provider = self.metrics_provider(env, members)
        label = self.provider_label(env)
        if not isinstance(provider, LeastExploitable):
            raise PluginError(f"{label} offers no least_exploitable_mixture() (the LeastExploitable protocol)")
        weights = await asyncio.to_thread(guarded, label, "least_exploitable_mixture", provider.least_exploitable_mixture,
                                          env, [self.action_probabilities(m, env) for m in members])
        weights = [float(w) for w in weights]
        if len(weights) != len(members) or min(weights, default=0.0) < -1e-9 or abs(sum(weights) - 1.0) > 1e-6:
            raise PluginError(f"{label}: least_exploitable_mixture returned {weights!r}; expected {len(members)} weights summing to 1")
        return weights

    def provider_label(self, env: EnvSpec) -> str:
        name = env_provider_of(env.env_id, self.default_env)
        return self.builder.label("env" if name == self.default_env else f"env_providers.{name}")

    def metrics_provider(self, env: EnvSpec, models: list[ModelRef]) -> PolicyMetrics | None:
        """``env``'s provider when it offers policy metrics and every model's backend scores completions."""
        name = env_provider_of(env.env_id, self.default_env)
        provider_key = "env" if name == self.default_env else f"env_providers.{name}"
        backend_keys = {"inference" if m.backend == self.trained_backend else f"backends.{m.backend}" for m in models}
        if not self.builder.spec(provider_key).policy_metrics or not all(self.builder.spec(k).scores_completions for k in backend_keys):
            return None
        provider = self.env_providers.providers[name]
        if not isinstance(provider, PolicyMetrics):
            raise PluginError(f"{self.builder.label(provider_key)} declares policy_metrics but has no policy_metrics()")
        return provider

    def action_probabilities(self, model: ModelRef, env: EnvSpec) -> ActionProbabilities:
        """``probabilities(observation, labels)`` of ``model`` through its backend, remembered
        per (model, template, observation, labels): a checkpoint is scored once a run."""
        backend, template = self.backend(model.backend), self.template(env.template)

        def probabilities(observation: str, labels: list[str]) -> list[float]:
            key = (model.uid, model.version, env.template, observation, tuple(labels))
            found = self._scored.get(key)
            if found is None:
                if backend.tokenizer is None and callable(getattr(backend, "prepare", None)):
                    backend.prepare(model)  # its tokenizer loaded: the prompt rendered as the games render it
                prompt = template.render(observation, tokenizer=backend.tokenizer)
                request = GenerationRequest(model=model, prompt=prompt, observation=observation, env_id=env.env_id)
                found = self._scored[key] = list(backend.completion_probabilities(request, [boxed_answer(label) for label in labels]))
            return list(found)

        return probabilities

    def close(self) -> None:
        for game in self._games:
            game.cancel()
        self._games.clear()
        self.env_calls.close()
        for backend in self._backends.values():
            try:
                backend.close()
            except Exception:
                pass
