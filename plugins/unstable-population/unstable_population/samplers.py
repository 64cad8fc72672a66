"""Model samplers `fictitious` and `psro`: opponents drawn from the league's whole population of
checkpoints, the two classical fixes for naive self-play's cycling in games with mixed equilibria.

`fictitious` (fictitious self-play, Heinrich, Lanctot & Silver 2015): each seat's opponent is
drawn from every checkpoint so far (the base model included), uniformly or weighted toward the
recent ones; the *average* of the population is what converges.

`psro` (Policy-Space Response Oracles, Lanctot et al. 2017): the league's results between
checkpoints form the empirical payoff matrix of a zero-sum meta-game; its Nash mixture (a linear
program, ``meta.py``) is re-solved every ``resolve_every`` recorded games, and opponents are drawn
from it (or, with ``spread``, from the best mixture in which every member has at least spread / n
of the draws, so that the learner never faces one fixed checkpoint). With payoffs from play, a
pair that has not played ``pair_games`` games is unknown, never an even match: the meta-game is
played among checkpoints whose pairs are all known, and the current checkpoint is seated against
each member it has not met enough (the Nash support's first) before any draw from the mixture
(the games that fill its row of the payoff matrix, as PSRO simulates each new policy against the
population; every training game seats it, so its pairs are the only ones the run can fill). One
replaced before its row is full enters on its pairs with the support and the newer members, the
older members it did not meet leaving (``candidates``). With ``meta_solver = "least"``
(exact payoffs) the mixture is instead the members' least exploitable one in the whole game, which
the run computes after each checkpoint (the "least exploitable restricted distribution" of Anytime
PSRO, McAleer et al. 2022): the Nash mixture of the restricted meta-game may be more exploitable
than a mixture of the same members, and more so after a member joins. With ``output = "least"``
only the population's policy (``mixture()``) is that least exploitable mixture, while opponents
are still drawn from the meta-solver's. A checkpoint enters the
meta-game once it has played ``entry_games`` games; until then it is drawn with probability
``explore`` so that it gets them.

Either may mix in the fixed opponents (``fixed_prob``), as the core's `random` sampler does.
With ``phase`` = k > 1 only the base model and every k-th checkpoint enter the population: the
learner trains k checkpoints' worth of updates against one fixed population before its policy
joins it, an approximate best response as both methods assume of a new policy (the latest
checkpoint is still the one that plays the learner's seat).
"""

from __future__ import annotations

import logging
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from unstable_core import EnvSpec, ModelRef

from .meta import nash_mixture, payoff_matrix

log = logging.getLogger("unstable.population")

PHASE_DESCRIPTION = (
    "Checkpoints per best-response phase: only the base model and every phase-th checkpoint enter the population "
    "the opponents come from, so the learner trains phase x training.save_every updates against one fixed population "
    "before its policy joins it (1: every checkpoint enters at once)."
)


def entered(pool: list[ModelRef], phase: int) -> list[ModelRef]:
    """The members of the population ``pool`` (the base model and the checkpoints, oldest first)
    under best-response phases of ``phase`` checkpoints: the base model and every phase-th one."""
    return pool[::phase]


class FictitiousOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phase: int = Field(1, ge=1, description=PHASE_DESCRIPTION)
    fixed_prob: float = Field(0.0, ge=0, le=1, description="Probability that a seat gets a fixed opponent instead.")
    weighting: Literal["uniform", "linear"] = Field(
        "uniform", description="'uniform': every checkpoint alike; 'linear': the k-th oldest weighs k (recent ones more)."
    )


def fixed_or(registry: Any, fixed_prob: float, rng: random.Random) -> ModelRef | None:
    """A fixed opponent with probability ``fixed_prob`` (when there are any), else None."""
    fixed = registry.fixed()
    return rng.choice(fixed) if fixed and fixed_prob > 0 and rng.random() < fixed_prob else None


class FictitiousSampler:
    def __init__(self, options: FictitiousOptions) -> None:
        self.options = options
        self.members: list[str] = []  # the population at the last draw, oldest first

    def weights(self, n: int) -> list[float]:
        return [1.0] * n if self.options.weighting == "uniform" else [float(k) for k in range(1, n + 1)]

    def mixture(self) -> dict[str, float]:
        """The mixture opponents are drawn from (fictitious play's output): uid -> probability."""
        weights = self.weights(len(self.members))
        return {uid: w / sum(weights) for uid, w in zip(self.members, weights, strict=True)}

    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        pool = entered(registry.checkpoints() or [anchor], self.options.phase)
        self.members = [r.uid for r in pool]
        weights = None if self.options.weighting == "uniform" else self.weights(len(pool))
        return [fixed_or(registry, self.options.fixed_prob, rng) or rng.choices(pool, weights=weights)[0]
                for _ in range(num_seats)]

    def state_dict(self) -> dict[str, Any]:
        return {"members": list(self.members)}  # its draws come from the league's generator, which the league saves

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.members = list(state.get("members", []))  # a state saved before members were kept: none until the next draw


class PSROOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    phase: int = Field(1, ge=1, description=PHASE_DESCRIPTION)
    fixed_prob: float = Field(0.0, ge=0, le=1, description="Probability that a seat gets a fixed opponent instead.")
    resolve_every: int = Field(200, ge=1, description="Games recorded (by the whole population) between two solutions of the meta-game.")
    entry_games: int = Field(50, ge=0, description="Games a checkpoint must have played before it enters the meta-game.")
    payoff: Literal["reward", "outcome", "exact"] = Field(
        "reward", description="The meta-game's payoff of a pair: 'reward', the row's mean reward against the column in the "
        "games they played (the game's score: chips in poker); 'outcome', its mean result (+1 a win, -1 a loss); 'exact', "
        "its exact expected reward, computed by the run for every pair of checkpoints (an exact game: openspiel; then "
        "every checkpoint enters once computed, and the meta-game is re-solved when one does, not every resolve_every games)."
    )
    spread: float = Field(
        0.0, ge=0, le=1, description="Opponents are drawn from the best mixture of the meta-game in which each of its n "
        "members has at least spread / n of the draws (0: the Nash mixture itself; 1: uniform, as fictitious). The "
        "population's 'meta' mixture stays the Nash one."
    )
    explore: float = Field(
        0.1, ge=0, le=1, description="Probability that a seat gets a checkpoint not yet in the meta-game (so that it plays its entry games)."
    )
    pair_games: int = Field(
        10, ge=1, description="With payoffs from play ('reward', 'outcome'): games a pair must have played before the "
        "meta-game reads its payoff (a pair never played is unknown, not an even match). The current checkpoint is "
        "seated against each member of the meta-game it has played fewer games with (the Nash support's first) before "
        "any opponent is drawn from the mixture; a checkpoint replaced before that row is full enters on its pairs "
        "with the support and the newer members, the older members it did not meet leaving."
    )
    meta_solver: Literal["nash", "least"] = Field(
        "nash", description="The mixture of the members opponents are drawn from: 'nash', the meta-game's Nash mixture; "
        "'least', the members' least exploitable mixture in the whole game (Anytime PSRO's; needs payoff = 'exact' and an "
        "env provider that computes it: openspiel), which the run computes after each checkpoint."
    )

    output: Literal["solver", "least"] = Field(
        "solver", description="The population's policy the run reports and serves as its 'meta' mixture: 'solver', the "
        "meta-solver's mixture; 'least', the members' least exploitable mixture in the whole game (needs payoff = "
        "'exact'; computed after each checkpoint), while opponents are still drawn from the meta-solver's."
    )

    @model_validator(mode="after")
    def _least_needs_exact(self) -> PSROOptions:
        if self.meta_solver == "least" and self.payoff != "exact":
            raise ValueError("meta_solver = 'least' needs payoff = 'exact' (the members' exact policies)")
        if self.output == "least" and self.payoff != "exact":
            raise ValueError("output = 'least' needs payoff = 'exact' (the members' exact policies)")
        if self.meta_solver == "least" and self.spread:
            raise ValueError("spread applies to the Nash mixture only; with meta_solver = 'least' leave it 0")
        return self


class PSROSampler:
    def __init__(self, options: PSROOptions) -> None:
        self.options = options
        self.members: list[str] = []
        self.weights: list[float] = []  # the meta-game's Nash mixture
        self.draws: list[float] = []  # the mixture opponents are drawn from (the Nash one unless spread > 0)
        self.solved_at: int | None = None  # total games recorded at the last solution
        self.least: dict[str, float] = {}  # with output = "least": the members' least exploitable mixture
        self.anchor: str | None = None  # the checkpoint seated by the last draw (payoffs from play)
        self.warned = False  # a replaced checkpoint's short row: a warning the first time, then info

    def mixture(self) -> dict[str, float]:
        """The population's policy: the meta-game's Nash mixture (or least exploitable one, with
        ``meta_solver`` or ``output`` "least"): uid -> probability."""
        if self.options.output == "least" and self.least:
            return dict(self.least)
        return dict(zip(self.members, self.weights, strict=True))

    def least_exploitable_members(self, registry: Any) -> list[str]:
        """With ``meta_solver`` or ``output`` "least", the members whose least exploitable mixture
        the run computes after each checkpoint (``LeastExploitableSampler``): [] when they have one."""
        if "least" not in (self.options.meta_solver, self.options.output) or registry.current is None:
            return []
        members = self.candidates(registry, registry.current)
        return members if len(members) > 1 and registry.least_exploitable(members) is None else []

    def candidates(self, registry: Any, anchor: ModelRef) -> list[str]:
        """The checkpoints the meta-game is played among. With exact payoffs, those whose payoffs
        the run has computed (every pair among them has one). From play, every pair among them has
        pair_games games: the last meta-game's members stay (those with entry_games games), and a
        checkpoint with entry_games games enters (oldest first) once it has pair_games games with
        every member, or, when it is no longer the anchor (its row cannot grow any more: every
        training game seats the anchor), with every member of the last Nash mixture's support, every
        member newer than itself and every checkpoint entered before it in this pass; the older
        members it has not met (outside the support: not drawn) leave."""
        pool = entered(registry.checkpoints() or [anchor], self.options.phase)
        first = pool[0].uid
        if self.options.payoff == "exact":
            return [first] + [r.uid for r in pool[1:] if registry.exact_payoff(r.uid, first) is not None]
        order = {r.uid: k for k, r in enumerate(pool)}
        ready = {r.uid for r in pool if registry.get(r.uid).games >= self.options.entry_games}
        members = [m for m in self.members if m in ready]  # the fallback of a meta-game without any stays out
        required = [m for m, w in zip(self.members, self.weights, strict=False) if w > 0 and m in members] or list(members)

        def met(a: str, b: str) -> bool:
            return registry.match_count(a, b) >= self.options.pair_games

        for r in pool:
            uid = r.uid
            if uid in members or uid not in ready:
                continue
            newer = [m for m in members if order[m] > order[uid]]
            if all(met(uid, m) for m in members) or (uid != anchor.uid and all(met(uid, m) for m in required + newer)):
                members = [m for m in members if met(uid, m)] + [uid]
                required.append(uid)
        return sorted(members, key=order.__getitem__) or [first]

    def unmet(self, registry: Any, anchor: ModelRef) -> list[list[ModelRef]]:
        """With payoffs from play, the population's members (the base model and the entered
        checkpoints) that the anchor, when it is one of them, has played fewer than pair_games
        games with, grouped in the order it is seated against them: the members of the meta-game's
        Nash support, then its other members (the anchor's row), then the checkpoints not in it
        that are newer than every member but the anchor (replaced before they entered: their pairs
        with the anchor, the only ones a training game can still fill)."""
        if self.options.payoff == "exact":
            return []
        pool = entered(registry.checkpoints() or [anchor], self.options.phase)
        if anchor.uid not in {r.uid for r in pool}:
            return []
        short = [r for r in pool if r.uid != anchor.uid and registry.match_count(anchor.uid, r.uid) < self.options.pair_games]
        support = {m for m, w in zip(self.members, self.weights, strict=False) if w > 0}
        order = {r.uid: k for k, r in enumerate(pool)}
        newest = max((order[m] for m in self.members if m in order and m != anchor.uid), default=-1)
        tiers = [[r for r in short if r.uid in support], [r for r in short if r.uid in self.members and r.uid not in support],
                 [r for r in short if r.uid not in self.members and order[r.uid] > newest]]
        return [t for t in tiers if t]

    def warn_incomplete(self, registry: Any, anchor: ModelRef) -> None:
        """As the next checkpoint is seated, a checkpoint that did not enter the meta-game: the
        members it left without pair_games games and the training games a full row takes (a
        warning the first time, then at info level)."""
        if not seated(anchor):
            return
        previous, self.anchor = self.anchor, anchor.uid
        if previous is None or previous == anchor.uid or previous not in registry.entries or previous in self.members:
            return
        short = [m for m in self.members if registry.match_count(previous, m) < self.options.pair_games]
        if short:
            log.log(
                logging.INFO if self.warned else logging.WARNING,
                "psro: %s is no longer current and has fewer than pair_games = %d games with %d of the meta-game's %d "
                "members (%s): not in the meta-game; a full row takes %d training games as current. It enters once it "
                "has met the Nash support's members (the current checkpoint is seated against it after its own row); a "
                "larger training.save_every or a smaller pair_games keeps every row full", previous,
                self.options.pair_games, len(short), len(self.members), ", ".join(short),
                self.options.pair_games * len(self.members))
            self.warned = True

    def solve(self, registry: Any, anchor: ModelRef) -> None:
        members = self.candidates(registry, anchor)
        if self.options.meta_solver == "least" and len(members) > 1:
            least = registry.least_exploitable(members)
            if least is None and self.members:  # the run computes it right after the payoffs: until then the last one
                return
            if least is not None:
                self.members, self.weights, self.draws = members, least, list(least)
                self.solved_at = total_games(registry)
                return
        self.members = members
        matrix = payoff_matrix(members, registry, self.options.payoff)
        self.weights = nash_mixture(matrix) if len(members) > 1 else [1.0]
        spread = self.options.spread
        self.draws = nash_mixture(matrix, floor=spread) if spread and len(members) > 1 else list(self.weights)
        self.solved_at = total_games(registry)

    def stale(self, registry: Any, anchor: ModelRef) -> bool:
        if self.solved_at is None or any(uid not in registry.entries for uid in self.members):
            return True
        if self.options.payoff != "exact" and seated(anchor) and anchor.uid != self.anchor:  # the last one's row is final
            return True
        if self.options.payoff == "exact":  # exact payoffs change only when a checkpoint's are computed
            members = self.candidates(registry, anchor)
            if self.options.meta_solver == "least" and members == self.members:  # ... or their least mixture
                return registry.least_exploitable(members) not in (None, self.weights)
            return members != self.members
        return total_games(registry) - self.solved_at >= self.options.resolve_every

    def sample(self, env: EnvSpec, anchor: ModelRef, num_seats: int, registry: Any, rng: random.Random) -> list[ModelRef]:
        if self.stale(registry, anchor):
            self.solve(registry, anchor)
        if self.options.payoff != "exact":
            self.warn_incomplete(registry, anchor)
        if self.options.output == "least" and len(self.members) > 1:
            least = registry.least_exploitable(self.members)
            if least is not None:  # the run computes it right after the payoffs: until then the last one
                self.least = dict(zip(self.members, least, strict=True))
        newcomers = [r for r in entered(registry.checkpoints(), self.options.phase) if r.uid not in self.members]
        unmet = self.unmet(registry, anchor)
        out = []
        for _ in range(num_seats):
            chosen = fixed_or(registry, self.options.fixed_prob, rng)
            if chosen is None and newcomers and rng.random() < self.options.explore:
                chosen = rng.choice(newcomers)
            if chosen is None and unmet:  # the anchor's missing pairs first
                chosen = rng.choice(unmet[0])
            if chosen is None:
                chosen = registry.get(rng.choices(self.members, weights=self.draws)[0]).ref
            out.append(chosen)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"members": list(self.members), "weights": list(self.weights), "draws": list(self.draws),
                "solved_at": self.solved_at, "least": dict(self.least), "anchor": self.anchor}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.members, self.weights, self.solved_at = list(state["members"]), list(state["weights"]), state["solved_at"]
        self.draws = list(state.get("draws", self.weights))  # a state saved before spread existed
        self.least = {str(uid): float(w) for uid, w in state.get("least", {}).items()}
        self.anchor = state.get("anchor")


def seated(anchor: ModelRef) -> bool:
    """Whether ``anchor`` is a member of the population (the learner's checkpoint or the base
    model), not a fixed opponent anchoring a tournament game."""
    return anchor.kind in ("checkpoint", "base")


def total_games(registry: Any) -> int:
    """Games the population has recorded (each game counted once per seat it had in the registry)."""
    return sum(e.games for e in registry.entries.values())
