"""unstable-trueskill: TrueSkill ratings and rating-aware opponent samplers for unstable."""

__version__ = "0.1.0"
