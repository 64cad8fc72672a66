"""The game runner: plays one GameSpec to a GameResult.

observation -> template -> prompt (with the legal actions' answers when the backend chooses among
them: ``collection.answers = "choice"``) -> inference (awaited, so a batching backend serves every game
in flight together) -> completion -> extracted action -> env step. Any exception from the env or a
backend fails that game with its reason; it never escapes.

Each value a component hands back is checked once: one of its field's exact type is used as it is
and the game's objects are built without validating again (``basemodel.trusted``); any other value
goes through pydantic validation, which coerces it or fails the game naming the field.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ...basemodel import trusted
from ...builtin.templates import boxed_answer
from ...errors import RunFailed, describe_error
from ...protocols import EnvProvider
from ...types import Completion, GameResult, GameSpec, GenerationRequest, ModelRef, PlayerTrajectory, Turn
from ..seeds import index_seed, turn_seed
from .envcalls import EnvCalls
from .lockstep import Lockstep

log = logging.getLogger("unstable")

#: seconds a request may wait before the console says so (``GameRunner.stall_after_s``)
STALL_WARNING_S = 20.0


class GameRunner:
    def __init__(
        self,
        env_provider: EnvProvider,
        templates: Callable[[str], Any],
        backends: Callable[[str], Any],
        max_turns: int = 200,
        max_action_chars: int = 1000,
        env_calls: EnvCalls | None = None,
        lockstep: Lockstep | None = None,
        request_timeout_s: float | None = None,
        answers_at_once: Callable[[str], bool] = lambda backend: False,
        offers_choices: Callable[[str], bool] = lambda backend: False,
    ) -> None:
        self.env_provider = env_provider
        self.templates = templates
        self.backends = backends
        self.max_turns = max_turns
        self.max_action_chars = max_action_chars
        self.env_calls = env_calls or EnvCalls("loop")
        self.lockstep = lockstep  # sync mode: turn rounds (lockstep.py)
        self.request_timeout_s = request_timeout_s
        self.answers_at_once = answers_at_once  # such a backend's requests need no bound
        self.offers_choices = offers_choices  # such a backend's requests carry the legal answers (answers = "choice")
        # a request waiting this long is said on the console (half the bound where that is sooner)
        self.stall_after_s = min(STALL_WARNING_S, request_timeout_s / 2) if request_timeout_s else STALL_WARNING_S
        self.waiting: set[tuple[str, str]] = set()  # (backend, uid) said to be waiting, until they answer

    async def _bounded(self, answer: Awaitable[Any], ref: ModelRef, where: str = "") -> Any:
        """``answer``, or RunFailed naming the backend and model when it takes longer than
        ``request_timeout_s``: a backend that never answers stops the run instead of hanging it.
        A request still waiting after ``stall_after_s`` is said on the console (a warning of the
        ``unstable`` logger, once per backend and model until it answers again): which request
        waits (``where``: env, game, turn, seat), on which backend and model, and when the bound
        ends the run."""
        timeout = self.request_timeout_s
        handle = None
        if timeout is not None and self.stall_after_s < timeout:
            handle = asyncio.get_running_loop().call_later(self.stall_after_s, self._stalled, ref, where)
        try:
            async with asyncio.timeout(timeout):  # in the game's own task (no task a request)
                answered = await answer
        except TimeoutError:
            raise RunFailed(f"inference {ref.backend!r} gave no answer for model {ref.uid!r} within "
                            f"collection.request_timeout_s = {timeout:g} s") from None
        finally:
            if handle is not None:
                handle.cancel()
        if self.waiting:
            self.waiting.discard((ref.backend, ref.uid))
        return answered

    def _stalled(self, ref: ModelRef, where: str) -> None:
        if (ref.backend, ref.uid) in self.waiting:
            return
        self.waiting.add((ref.backend, ref.uid))
        log.warning("inference %r has not answered model %r for %g s (%s); still waiting: the run stops at "
                    "collection.request_timeout_s = %g s", ref.backend, ref.uid, self.stall_after_s, where,
                    self.request_timeout_s)

    async def play(self, spec: GameSpec) -> GameResult:
        start = time.perf_counter()
        seats = spec.seats
        n = len(seats)
        turn_lists: list[list[dict[str, Any]]] = [[] for _ in seats]
        infos: list[dict[str, Any]] = [{} for _ in seats]
        rewards: dict[int, float] = {}
        outcome, error = "finished", None
        env: Any = None
        turns = 0
        exact = True  # every value from a component had its field's exact type
        try:
            # resolved once per game: the loop below runs for every turn of every game
            backends = [self.backends(ref.backend) for ref in seats]
            timeout = self.request_timeout_s
            bounded = [timeout is not None and not self.answers_at_once(ref.backend) for ref in seats]
            for b, ref in zip(backends, seats, strict=True):
                if b.tokenizer is None and callable(getattr(b, "prepare", None)):
                    # a backend that loads its model (and tokenizer) at its first request loads it now:
                    # the game's first prompt is rendered with its chat template as every later one
                    await asyncio.to_thread(b.prepare, ref)
            tokenizers = [b.tokenizer for b in backends]
            choosing = [self.offers_choices(ref.backend) for ref in seats]
            env_id, seed = spec.env.env_id, spec.seed
            # a grouped game's own sampling stream, after the turns its group shares (branch_turn)
            own, branch = (index_seed(seed, spec.group_index), spec.branch_turn) if spec.group_index else (seed, 0)
            template = self.templates(spec.env.template)
            render, extract = template.render, template.extract
            # env calls run on the loop, or on threads once this env id is known to be slow (envcalls)
            calls, lockstep = self.env_calls, self.lockstep
            threaded, slow_s, perf = calls.threaded(env_id), calls.slow_after(), time.perf_counter
            if threaded:
                env = await calls.run(self.env_provider.make, spec.env)
                await calls.run(lambda: env.reset(num_players=spec.env.num_players, seed=seed))
            else:
                started = perf()
                env = self.env_provider.make(spec.env)
                env.reset(num_players=spec.env.num_players, seed=seed)
                if perf() - started > slow_s:
                    threaded = calls.mark_slow(env_id)
            done = False
            while not done:
                if turns >= self.max_turns:
                    outcome = "truncated"
                    break
                if threaded:
                    pid, observation = await calls.run(env.observe)
                else:
                    started = perf()
                    pid, observation = env.observe()
                    if perf() - started > slow_s:
                        threaded = calls.mark_slow(env_id)
                if not 0 <= pid < n:
                    raise RuntimeError(f"environment asked player {pid} to act; the table has {n} seats")
                prompt = render(observation, tokenizer=tokenizers[pid])
                fields = {
                    "model": seats[pid], "prompt": prompt, "observation": observation, "env_id": env_id,
                    "player_id": pid, "seed": turn_seed(own if turns >= branch else seed, turns), "game_seed": seed,
                    "choices": None,
                }
                if choosing[pid]:  # collection.answers = "choice": the answers of the legal actions
                    labels = await calls.run(env.legal_actions) if threaded else env.legal_actions()
                    fields["choices"] = [boxed_answer(label) for label in labels]
                # the env's and template's values are used as they are when their types are
                # exact; anything else is validated (coerced, or the game fails naming the field)
                if type(prompt) is str and type(observation) is str and type(pid) is int:
                    request = trusted(GenerationRequest, fields)
                else:
                    request = GenerationRequest.of(fields)
                    exact = False
                if lockstep is not None:
                    await lockstep.turn((spec.game_idx, spec.seed))
                if bounded[pid]:
                    completion = await self._bounded(backends[pid].generate(request), seats[pid],
                                                     f"{env_id}, game {spec.game_idx}, turn {turns}, seat {pid}")
                else:
                    completion = await backends[pid].generate(request)
                if not isinstance(completion, Completion):
                    completion = Completion.model_validate(completion)
                action, format_ok = extract(completion.text)
                if type(action) is str and len(action) > self.max_action_chars:  # a huge action can stall the env for seconds
                    action = action[: self.max_action_chars]
                if threaded:
                    done, invalid = await calls.run(env.step, action)
                else:
                    started = perf()
                    done, invalid = env.step(action)
                    if perf() - started > slow_s:
                        threaded = calls.mark_slow(env_id)
                if exact and not (type(action) is str and type(format_ok) is bool and type(invalid) is bool):
                    exact = False
                turn_lists[pid].append(
                    {  # becomes a Turn with the whole result, below
                        "player_id": pid,
                        "index": turns,
                        "observation": observation,
                        "prompt": prompt,
                        "prompt_token_ids": completion.prompt_token_ids,
                        "completion": completion.text,
                        "completion_token_ids": completion.completion_token_ids,
                        "logprobs": completion.logprobs,
                        "policy_version": completion.policy_version,
                        "action": action,
                        "format_ok": format_ok,
                        "invalid": invalid,
                        "trainable": completion.trainable,
                        "truncated": completion.truncated,
                        "choice_token_ids": completion.choice_token_ids,
                        "choice_probabilities": completion.choice_probabilities,
                    }
                )
                turns += 1
            if not threaded:  # make and reset, then an observe and a step a turn, were timed
                calls.played(env_id, 1 + 2 * turns)
            if outcome == "truncated":
                rewards = {i: 0.0 for i in range(n)}
            else:
                env_rewards, info = await calls.run(env.close) if threaded else env.close()
                env = None
                rewards = {i: float(env_rewards.get(i, 0.0)) for i in range(n)}
                infos = [_jsonable(info.get(i, {})) for i in range(n)]
        except RunFailed:  # a component says the run cannot go on (an API that is down)
            raise
        except Exception as exc:  # a failed game never stops the loop
            outcome, error, rewards = "failed", describe_error(exc), {}
        finally:
            if env is not None:
                try:
                    env.close()
                except Exception:
                    pass
        trajectories: list[dict[str, Any]] = [
            {"player_id": i, "model": ref, "turns": turn_lists[i], "final_reward": rewards.get(i, 0.0), "info": infos[i]}
            for i, ref in enumerate(seats)
        ]
        result = {
            "game": spec, "trajectories": trajectories, "rewards": rewards, "outcome": outcome, "error": error,
            "num_turns": turns, "duration_s": time.perf_counter() - start,
        }
        if exact:
            # every value is validated or of its field's exact type: build without validating again
            for trajectory in trajectories:
                trajectory["turns"] = [trusted(Turn, t) for t in trajectory["turns"]]
            result["trajectories"] = [trusted(PlayerTrajectory, t) for t in trajectories]
            return trusted(GameResult, result)
        try:
            return GameResult.of(result)  # one validation: the result with its trajectories and turns
        except ValidationError as exc:  # a component handed back a malformed value: the game fails
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return GameResult.of({
                **result, "trajectories": [{"player_id": i, "model": ref} for i, ref in enumerate(seats)],
                "rewards": {}, "outcome": "failed", "error": f"ValidationError: {where}: {first['msg']}",
            })


def _jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in info.items():
        out[str(k)] = v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
    return out
