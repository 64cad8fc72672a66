"""Which prefix-shared layout a learner uses: measured on the run's own model and device.

Both layouts give the same logprobs and gradients (to rounding), so the choice costs no extra
work: while more than one is left, the chunks of the first updates take the candidates in turn,
each chunk's loss + backward timed per token of its steps; after a first chunk each (a warm-up)
and ``trials`` more, the candidate with the lowest median time a token is kept for the rest of
the run, with one log line. The timings, and so the choice, differ from run to run: an 'auto'
run is not bitwise reproducible (a sync run with a fixed layout is); its state goes into the
learner's snapshot, so a resumed run continues with the layouts the uninterrupted one would
have used.
"""

from __future__ import annotations

import logging
import statistics

log = logging.getLogger("unstable.hf")


class LayoutChoice:
    """The layout of each chunk among ``candidates`` ('masks', 'segments'; one candidate: always
    that one), chosen by the timings ``record`` is given."""

    def __init__(self, candidates: list[str], trials: int = 3, model: str = "") -> None:
        self.candidates = list(candidates)
        self.trials = trials
        self.model = model
        self.timings: dict[str, list[float]] = {c: [] for c in self.candidates}
        self.chosen: str | None = self.candidates[0] if len(self.candidates) == 1 else None
        self._turn = 0

    def next(self) -> str:
        """The layout of the next chunk."""
        if self.chosen is not None:
            return self.chosen
        layout = self.candidates[self._turn % len(self.candidates)]
        self._turn += 1
        return layout

    def state_dict(self) -> dict:
        """What a resumed run needs to give its chunks the layouts the uninterrupted run would."""
        return {"timings": {c: list(t) for c, t in self.timings.items()}, "turn": self._turn, "chosen": self.chosen}

    def load_state_dict(self, state: dict) -> None:
        if sorted(state["timings"]) != sorted(self.candidates):  # another prefix_layout: measure afresh
            return
        self.timings = {c: list(t) for c, t in state["timings"].items()}
        self._turn, self.chosen = int(state["turn"]), state["chosen"]

    def record(self, layout: str, seconds: float, tokens: int) -> None:
        """A chunk's loss + backward took ``seconds`` for ``tokens`` tokens of steps."""
        if self.chosen is not None or tokens <= 0:
            return
        self.timings[layout].append(seconds / tokens)
        if all(len(t) > self.trials for t in self.timings.values()):
            medians = {c: statistics.median(t[1:]) for c, t in self.timings.items()}  # the first: a warm-up
            self.chosen = min(medians, key=medians.__getitem__)
            log.info("prefix layout for %s: %s (%s µs a token)", self.model, self.chosen,
                     ", ".join(f"{c} {m * 1e6:.1f}" for c, m in medians.items()))
