"""Which env provider makes a game: the one an env id names ('PROVIDER/GAME'), else the run's
[env] provider, so that one run can mix games of several libraries."""

from __future__ import annotations

from collections.abc import Mapping

from ...config import env_provider_of
from ...protocols import EnvProvider, GameEnv
from ...types import EnvSpec


class EnvProviders:
    def __init__(self, default: str, providers: Mapping[str, EnvProvider]) -> None:
        self.default = default
        self.providers = dict(providers)
        self._by_id: dict[str, EnvProvider] = {}

    def make(self, env: EnvSpec) -> GameEnv:
        provider = self._by_id.get(env.env_id)
        if provider is None:
            provider = self._by_id[env.env_id] = self.providers[env_provider_of(env.env_id, self.default)]
        return provider.make(env)

    def known_env_ids(self) -> list[str]:
        """Every provider's ids, a non-default provider's under its prefix."""
        ids = []
        for name, provider in self.providers.items():
            prefix = "" if name == self.default else f"{name}/"
            ids += [i if i.startswith(prefix) else prefix + i for i in provider.known_env_ids()]
        return ids
