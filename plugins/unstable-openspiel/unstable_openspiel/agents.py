"""inference `openspiel`: strong fixed opponents for OpenSpiel games, served like any model.

    uniform                     every legal action alike
    cfr, cfr:N                  OpenSpiel's CFR average policy after N iterations (default 1000)
    best-response:SPEC          each seat's best response to SPEC (a scripted agent, or an agent
                                of this backend), computed exactly by OpenSpiel

A policy is computed once per (game, parameters) in a process and kept. The agent sees only the
observation text, like a model: it looks the observation up among the game's information states
(each rendered as the env renders it) and samples its action with the request's seed.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from unstable_core import Checkpoint, Completion, GenerationRequest, ModelRef, build_component

from . import games, policies
from .env import INVALID_NOTE

DEFAULT_CFR_ITERATIONS = 1000
AGENT_KINDS = ("uniform", "cfr", "best-response")


class AgentOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_info_states: int = Field(policies.MAX_INFO_STATES, ge=1, description="Largest game (information states) a policy is computed for.")


class AgentModelOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="The game's parameters, as the env's kwargs give them (e.g. num_cards for goofspiel)."
    )


def check_spec(ref: ModelRef) -> None:
    """Raise ValueError for a model name this backend does not serve."""
    parse(ref.model or ref.uid)


def parse(spec: str) -> tuple[str, str]:
    """('uniform' | 'cfr' | 'best-response', argument)."""
    kind, _, arg = spec.partition(":")
    if kind == "uniform" and not arg:
        return kind, ""
    if kind == "cfr":
        if arg and not (arg.isdigit() and int(arg) > 0):
            raise ValueError(f"openspiel agent {spec!r}: cfr:N takes a positive number of iterations")
        return kind, arg or str(DEFAULT_CFR_ITERATIONS)
    if kind == "best-response" and arg:
        return kind, arg
    raise ValueError(f"unknown openspiel agent {spec!r}: uniform, cfr, cfr:N or best-response:SPEC")


class AgentPolicies:
    """Tabular policies by (agent, game, parameters), with each game's observation lookup."""

    def __init__(self, max_info_states: int) -> None:
        self.limit = max_info_states
        self._tables: dict[tuple[str, str, str], Any] = {}
        self._lookup: dict[tuple[str, str], dict[str, policies.InfoState]] = {}
        self._lock = threading.Lock()

    def info_state(self, env_id: str, params: dict[str, Any], observation: str) -> policies.InfoState:
        key = (env_id, repr(sorted(params.items())))
        lookup = self._lookup.get(key)
        if lookup is None:
            lookup = self._lookup[key] = {s.observation: s for s in policies.info_states(env_id, params, self.limit)}
        text = observation.removeprefix(INVALID_NOTE + "\n")
        found = lookup.get(text)
        if found is None:
            raise ValueError(f"openspiel agents: the observation is none of {games.game_name(env_id)}'s information states")
        return found

    def table(self, spec: str, env_id: str, params: dict[str, Any]) -> Any:
        key = (spec, env_id, repr(sorted(params.items())))
        with self._lock:
            if key not in self._tables:
                self._tables[key] = self._compute(spec, env_id, params)
            return self._tables[key]

    def _compute(self, spec: str, env_id: str, params: dict[str, Any]) -> Any:
        kind, arg = parse(spec)
        if kind == "uniform":
            return policies.tabulate(env_id, params, lambda info: {a: 1 / len(info.labels) for a in info.labels.values()}, self.limit)
        if kind == "cfr":
            return policies.cfr_policy(env_id, params, int(arg))
        base = self._compute(arg, env_id, params) if is_agent(arg) else scripted_policy(arg, env_id, params, self.limit)
        return policies.best_response_policy(env_id, params, base)[0]


def is_agent(spec: str) -> bool:
    """Whether SPEC names an agent of this backend (else a scripted agent)."""
    return spec.partition(":")[0] in AGENT_KINDS


def scripted_policy(agent: str, env_id: str, params: dict[str, Any], limit: int = policies.MAX_INFO_STATES) -> Any:
    """The exact tabular policy of a scripted agent (``unstable_core``'s ``scripted`` backend)."""
    scripted = build_component("inference", "scripted")
    ref = ModelRef(uid=agent, model=agent, kind="fixed", backend="scripted")

    def probs(info: policies.InfoState) -> dict[int, float]:
        request = GenerationRequest(model=ref, prompt=info.observation, observation=info.observation, env_id=env_id, seed=0)
        labels = list(info.labels)
        found = scripted.completion_probabilities(request, [canonical(label) for label in labels])
        total = sum(found)
        return {info.labels[label]: (p / total if total else 1 / len(labels)) for label, p in zip(labels, found)}

    return policies.tabulate(env_id, params, probs, limit)


def canonical(label: str) -> str:
    """The completion that plays ``label`` as the templates extract it."""
    return f"\\boxed{{{label}}}"


class OpenSpielAgents:
    """Serves uniform, cfr and best-response agents; every call completes at once."""

    tokenizer = None

    def __init__(self, options: AgentOptions) -> None:
        self.policies = AgentPolicies(options.max_info_states)

    def _row(self, request: GenerationRequest) -> tuple[policies.InfoState, Any]:
        params = dict(request.model.options.get("params", {}))
        info = self.policies.info_state(request.env_id, params, request.observation)
        table = self.policies.table(request.model.model or request.model.uid, request.env_id, params)
        return info, table.policy_for_key(info.key)

    async def generate(self, request: GenerationRequest) -> Completion:
        info, row = self._row(request)
        labels = list(info.labels)
        weights = [float(row[info.labels[label]]) for label in labels]
        label = random.Random(request.seed).choices(labels, weights=weights)[0]
        return Completion(text=canonical(label), policy_version=request.model.version)

    def completion_probabilities(self, request: GenerationRequest, completions: list[str]) -> list[float]:
        info, row = self._row(request)
        by_text = {canonical(label): float(row[action]) for label, action in info.labels.items()}
        return [by_text.get(c, 0.0) for c in completions]

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        return checkpoint.version

    def close(self) -> None:
        return None
