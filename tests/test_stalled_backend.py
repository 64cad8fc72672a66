"""A backend that never answers is said on the console before ``collection.request_timeout_s``
ends the run: which request waits (env, game, turn, seat) on which backend and model, once per
backend and model, after ``STALL_WARNING_S`` (20 s) or half the bound where that is sooner."""

from __future__ import annotations

import asyncio
import logging

import pytest

import unstable_core
from unstable_core import InferenceSpec, RunFailed, hookimpl
from unstable_core.testing import toy_plugin


class Silent:
    tokenizer = None

    async def generate(self, request):
        await asyncio.Event().wait()  # never set

    def load_checkpoint(self, checkpoint):
        return checkpoint.version

    def close(self):
        pass


class SilentPlugin:
    @hookimpl
    def unstable_inference_backends(self):
        return [InferenceSpec(name="silent", summary="Never answers", factory=lambda o, ctx: Silent(), serves_checkpoints=False)]


def test_a_waiting_request_is_said_before_the_bound_ends_the_run(make_plugin_system, tmp_path, caplog):
    system = make_plugin_system(toy_plugin, ("silent-plugin", SilentPlugin()))
    cfg = {"name": "t", "seed": 0, "env": {"name": "toy"}, "train_envs": ["PickBest-v0"],
           "opponents": ["random-valid", {"uid": "mute", "model": "m", "backend": "silent"}], "model_sampler": {"name": "fixed"},
           "collection": {"tournament_games": 50, "num_train_games": 4, "request_timeout_s": 1.0}, "trackers": []}
    with caplog.at_level(logging.WARNING, logger="unstable"), pytest.raises(RunFailed, match="within collection.request_timeout_s = 1 s"):
        unstable_core.run(cfg, run_dir=tmp_path / "r", plugins=system)
    said = [r.getMessage() for r in caplog.records if "has not answered" in r.getMessage()]
    assert len(said) == 1, said  # 4 games wait on it: said once
    assert said[0].startswith("inference 'silent' has not answered model 'mute' for 0.5 s (PickBest-v0, game ")
    assert ", turn " in said[0] and ", seat " in said[0]
    assert said[0].endswith("still waiting: the run stops at collection.request_timeout_s = 1 s")


def test_the_console_is_told_within_30_s_of_the_default_bound():
    from unstable_core.config import CollectionConfig
    from unstable_core.runtime.game.runner import STALL_WARNING_S, GameRunner

    default = CollectionConfig().request_timeout_s
    runner = GameRunner(env_provider=None, templates=lambda n: None, backends=lambda n: None, request_timeout_s=default)
    assert runner.stall_after_s == STALL_WARNING_S <= 30 < default
