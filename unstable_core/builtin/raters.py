"""rater `wins`: win/draw/loss counts; the rating is the score (wins + draws/2) / games."""

from __future__ import annotations

from typing import Any

from .. import hookimpl
from ..components import RaterSpec
from ..types import GameResult


class WinsRater:
    """Relies on the registry's own counts (``ModelRegistry.record_game``), which the loop
    updates before calling raters, and derives a score from them."""

    def update(self, result: GameResult, registry: Any) -> None:
        entries = registry.entries
        for ref in result.game.seats:
            entry = entries.get(ref.uid)
            if entry is not None and entry.games:
                entry.rating["score"] = (entry.wins + 0.5 * entry.draws) / entry.games

    def ratings(self, registry: Any) -> dict[str, dict[str, float]]:
        return {uid: dict(e.rating) for uid, e in registry.entries.items()}


@hookimpl
def unstable_raters() -> list[RaterSpec]:
    return [RaterSpec(name="wins", summary="Win/draw/loss counts; score = (wins + draws/2) / games", factory=lambda o, ctx: WinsRater())]
