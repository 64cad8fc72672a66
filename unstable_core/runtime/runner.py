"""The game runner: plays one GameSpec to a GameResult.

observation -> template -> prompt -> inference (awaited, so a batching backend serves every game
in flight together) -> completion -> extracted action -> env step. Any exception from the env or a
backend fails that game with its reason; it never escapes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..types import GameResult, GameSpec, GenerationRequest, PlayerTrajectory, Turn


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed determined by the parts (stable across processes and Python versions)."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def turn_seed(game_seed: int, turn: int) -> int:
    """Sampling seed of one turn: distinct per turn, determined by the game seed (cheap: it runs
    for every turn)."""
    return (game_seed * 1_000_003 + turn * 7_919 + 1) & 0x7FFFFFFF


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class GameRunner:
    def __init__(
        self,
        env_provider: Any,
        templates: Callable[[str], Any],
        backends: Callable[[str], Any],
        max_turns: int = 200,
    ) -> None:
        self.env_provider = env_provider
        self.templates = templates
        self.backends = backends
        self.max_turns = max_turns

    async def play(self, spec: GameSpec) -> GameResult:
        start = time.perf_counter()
        trajectories = [PlayerTrajectory(player_id=i, model=ref) for i, ref in enumerate(spec.seats)]
        result = GameResult(game=spec, trajectories=trajectories)
        env = None
        turns = 0
        try:
            env = self.env_provider.make(spec.env)
            env.reset(num_players=spec.env.num_players, seed=spec.seed)
            template = self.templates(spec.env.template)
            done = False
            while not done:
                if turns >= self.max_turns:
                    result.outcome = "truncated"
                    break
                pid, observation = env.observe()
                if not 0 <= pid < len(spec.seats):
                    raise RuntimeError(f"environment asked player {pid} to act; the table has {len(spec.seats)} seats")
                ref = spec.seats[pid]
                backend = self.backends(ref.backend)
                prompt = template.render(observation, tokenizer=getattr(backend, "tokenizer", None))
                request = GenerationRequest(
                    model=ref, prompt=prompt, observation=observation, env_id=spec.env.env_id,
                    player_id=pid, seed=turn_seed(spec.seed, turns),
                )
                completion = await backend.generate(request)
                action, format_ok = template.extract(completion.text)
                done, invalid = env.step(action)
                trajectories[pid].turns.append(
                    Turn(
                        player_id=pid,
                        index=turns,
                        observation=observation,
                        prompt=prompt,
                        prompt_token_ids=completion.prompt_token_ids,
                        completion=completion.text,
                        completion_token_ids=completion.completion_token_ids,
                        logprobs=completion.logprobs,
                        policy_version=completion.policy_version,
                        action=action,
                        format_ok=format_ok,
                        invalid=invalid,
                    )
                )
                turns += 1
            if result.outcome == "truncated":
                result.rewards = {i: 0.0 for i in range(len(spec.seats))}
            else:
                rewards, info = env.close()
                env = None
                result.rewards = {i: float(rewards.get(i, 0.0)) for i in range(len(spec.seats))}
                for pid, traj in enumerate(trajectories):
                    traj.info = _jsonable(info.get(pid, {}))
            for pid, traj in enumerate(trajectories):
                traj.final_reward = result.rewards.get(pid, 0.0)
        except Exception as exc:  # a failed game never stops the loop
            result.outcome = "failed"
            result.error = describe_error(exc)
            result.rewards = {}
        finally:
            if env is not None:
                try:
                    env.close()
                except Exception:
                    pass
        result.num_turns = turns
        result.duration_s = time.perf_counter() - start
        return result


def _jsonable(info: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in info.items():
        out[str(k)] = v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)
    return out
