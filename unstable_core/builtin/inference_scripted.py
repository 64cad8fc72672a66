"""inference `scripted`: agents that need no model, for fixed opponents, tournaments and tests.

A ``ModelRef`` served by this backend names its agent in ``model`` (``random-valid``,
``first-valid``, ``greedy``, ``best-response``, ``garbage``). Agents read the raw observation;
their answers are boxed (``\\boxed{4}``) so the templates' extraction applies to them as to a
language model.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from .. import hookimpl
from ..basemodel import trusted
from ..components import InferenceSpec
from ..types import Checkpoint, Completion, GenerationRequest, ModelRef

_BRACKETED = re.compile(r"\[([^\[\]\n]{1,40})\]")
_AVAILABLE_LINE = re.compile(r"(available (?:moves|actions)[^\n]*|valid (?:moves|actions)[^\n]*)", re.IGNORECASE)


def _connect_four_moves(observation: str) -> list[str] | None:
    idx = observation.rfind("Board state:")
    if idx < 0:
        return None
    lines = [ln for ln in observation[idx:].splitlines()[1:] if ln.strip()]
    if len(lines) < 3:
        return None
    header = lines[0].split()
    body = [ln.split() for ln in lines[2:] if set(ln.split()) <= {".", "X", "O"} and ln.split()]
    if not body:
        return None
    top = body[0]
    return [f"[col {header[c]}]" for c in range(min(len(header), len(top))) if top[c] == "."]


def valid_moves(observation: str) -> list[str]:
    """Valid moves read off a TextArena observation (the last 'available moves' line, a
    ConnectFour board), or every bracketed option in it as a fallback."""
    lines = _AVAILABLE_LINE.findall(observation)
    if lines:
        moves = [f"[{m.strip()}]" for m in _BRACKETED.findall(lines[-1])]
        if moves:
            return list(dict.fromkeys(moves))
    c4 = _connect_four_moves(observation)
    if c4:
        return c4
    return list(dict.fromkeys(f"[{m.strip()}]" for m in _BRACKETED.findall(observation)))


def _tictactoe_board(observation: str) -> tuple[list[str], str] | None:
    """(cells, my symbol) from a TicTacToe observation, or None."""
    me = re.search(r"you will be '([XO])'", observation)
    idx = observation.rfind("Current Board:")
    if me is None or idx < 0:
        return None
    rows = [ln for ln in observation[idx:].splitlines()[1:] if "|" in ln][:3]
    if len(rows) != 3:
        return None
    cells = [c.strip() for row in rows for c in row.split("|")]
    if len(cells) != 9:
        return None
    return cells, me.group(1)


_LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


def _completing_move(cells: list[str], symbol: str) -> int | None:
    for line in _LINES:
        marks = [cells[i] for i in line]
        if marks.count(symbol) == 2:
            for i in line:
                if cells[i] not in ("X", "O"):
                    return i
    return None


def _boxed(move: str) -> str:
    return f"\\boxed{{{move}}}"


def agent_random_valid(observation: str, rng: random.Random) -> str:
    moves = valid_moves(observation)
    return _boxed(rng.choice(moves)) if moves else "I cannot find a valid move."


def agent_first_valid(observation: str, rng: random.Random) -> str:
    moves = valid_moves(observation)
    return _boxed(moves[0]) if moves else "I cannot find a valid move."


def agent_greedy(observation: str, rng: random.Random) -> str:
    """TicTacToe: win if possible, else block, else random-valid. Other games: random-valid."""
    board = _tictactoe_board(observation)
    if board is not None:
        cells, me = board
        other = "X" if me == "O" else "O"
        for symbol in (me, other):
            cell = _completing_move(cells, symbol)
            if cell is not None:
                return _boxed(f"[{cell}]")
    return agent_random_valid(observation, rng)


KUHN_BEST_RESPONSE = ("[bet]", "[call]", "[check]")


def agent_best_response(observation: str, rng: random.Random) -> str:
    """The best response to ``random-valid`` where it is known; the ceiling a learner's win rate
    against ``random-valid`` is measured against (docs/learning.md).

    KuhnPoker: bet, and call a bet; never fold. In TextArena's KuhnPoker a bet or a call does not
    change the pot (each round is worth one chip whatever is bet), so a round is won by the
    opponent's fold or at the showdown, and a bet (random-valid folds half the time) or a call (a
    fold loses for sure) is never worse than the other choice. Other games: ``greedy``.
    """
    moves = valid_moves(observation)
    if "[fold]" in moves or "[bet]" in moves:
        for move in KUHN_BEST_RESPONSE:
            if move in moves:
                return _boxed(move)
    return agent_greedy(observation, rng)


GARBAGE = [
    "",
    "x" * 100_000,
    "\udcff\udcfe invalid utf-8 \udc80",
    "\\boxed{banana}",
    "[[[[]]]]]]",
    "\x00\x01\x02",
    "\\boxed{" + "9" * 5000 + "}",
    "Let me think... " * 200,
]


def agent_garbage(observation: str, rng: random.Random) -> str:
    """Empty, huge, non-UTF-8 (lone surrogates) or nonsense completions, for fault tests."""
    return rng.choice(GARBAGE)


AGENTS: dict[str, Callable[[str, random.Random], str]] = {
    "random-valid": agent_random_valid,
    "first-valid": agent_first_valid,
    "greedy": agent_greedy,
    "best-response": agent_best_response,
    "garbage": agent_garbage,
}


class ScriptedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


def check_agent(ref: ModelRef) -> None:
    """Raise ValueError for an agent name this backend does not know (checked before a run)."""
    if ref.model not in AGENTS:
        close = difflib.get_close_matches(ref.model, list(AGENTS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown scripted agent {ref.model!r}.{hint} Known: {', '.join(AGENTS)}")


class _Branches(random.Random):
    """A generator that answers ``choice`` along a given path of indices, recording each choice's
    width, and refuses every other draw: an agent whose randomness is ``rng.choice`` alone can be
    run once per path to enumerate its answers exactly."""

    def __init__(self, path: list[int]) -> None:
        super().__init__(0)
        self.path: list[int] = path
        self.widths: list[int] = []

    def choice(self, seq: Any) -> Any:
        k = self.path[len(self.widths)] if len(self.widths) < len(self.path) else 0
        self.widths.append(len(seq))
        return seq[k]

    def random(self) -> float:
        raise ValueError("this agent draws other than rng.choice: its answers cannot be enumerated exactly")

    def getrandbits(self, k: int) -> int:
        return int(self.random())


def answer_distribution(agent: Callable[[str, random.Random], str], observation: str, limit: int = 100_000) -> dict[str, float]:
    """Every answer of ``agent`` to ``observation`` with its exact probability, by running it once
    per path of its ``rng.choice`` draws (each draw uniform over its options)."""
    found: dict[str, float] = {}
    pending: list[list[int]] = [[]]
    while pending:
        path = pending.pop()
        rng = _Branches(path)
        answer = agent(observation, rng)
        p = 1.0
        for width in rng.widths:
            p /= width
        found[answer] = found.get(answer, 0.0) + p
        # branch on every draw past the given path (the path itself took index 0 there)
        for depth in range(len(path), len(rng.widths)):
            prefix = path + [0] * (depth - len(path))
            pending += [prefix + [k] for k in range(1, rng.widths[depth])]
        if len(pending) > limit:
            raise ValueError(f"more than {limit} answer paths: too many to enumerate")
    return found


class ScriptedInference:
    """Serves scripted agents; every call completes at once (no batching needed)."""

    tokenizer = None

    async def generate(self, request: GenerationRequest) -> Completion:
        return self.complete(request)

    def complete(self, request: GenerationRequest) -> Completion:
        agent = AGENTS.get(request.model.model)
        if agent is None:
            check_agent(request.model)  # raises with the known names
            raise AssertionError(request.model.model)  # unreachable: check_agent raised
        text = agent(request.observation, random.Random(request.seed))
        # every field, each of its exact type: built without validation (the agents return str)
        return trusted(Completion, {
            "text": text, "prompt_token_ids": [], "completion_token_ids": [], "logprobs": [],
            "policy_version": request.model.version, "trainable": True,
            "truncated": False, "choice_token_ids": [], "choice_probabilities": [],
        })

    def completion_probabilities(self, request: GenerationRequest, completions: list[str]) -> list[float]:
        """The exact probability that ``generate(request)`` answers each of ``completions``."""
        agent = AGENTS.get(request.model.model)
        if agent is None:
            check_agent(request.model)
            raise AssertionError(request.model.model)
        found = answer_distribution(agent, request.observation)
        return [found.get(c, 0.0) for c in completions]

    def load_checkpoint(self, checkpoint: Checkpoint) -> int:
        return checkpoint.version  # agents have no weights: any version is served as it is

    def close(self) -> None:
        return None


@hookimpl
def unstable_inference_backends() -> list[InferenceSpec]:
    return [
        InferenceSpec(
            name="scripted",
            summary=f"Agents that need no model: {', '.join(AGENTS)}",
            config=ScriptedOptions,
            factory=lambda options, ctx: ScriptedInference(),
            check_model=check_agent,
            serves_checkpoints=False,
            answers_at_once=True,
            scores_completions=True,
        )
    ]
