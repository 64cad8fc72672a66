"""What crosses a process boundary under the ray executor comes back as it was sent."""

from __future__ import annotations

import asyncio
import sys

import unstable_core
from unstable_core.executors import build_role
from unstable_core.testing.executor import TOURNAMENT
from unstable_ray.wire import Packed, pack, unpack, with_specs, without_specs


def played(tmp_path, n=24):
    """Specs of ``n`` tournament games and their results, played in this process."""
    job = unstable_core.build(TOURNAMENT, run_dir=tmp_path / "run")
    league, rollout = (build_role(role, job.plan, job.plugins) for role in ("league", "rollout"))

    async def play():
        specs = await league.schedule(n, "tournament")
        return specs, await rollout.play(specs)

    return asyncio.run(play())


def test_game_results_travel_packed_and_come_back_equal_with_their_specs(tmp_path):
    specs, results = played(tmp_path)
    expected = [r.model_dump() for r in results]
    assert sum(len(t.turns) for r in results for t in r.trajectories) > len(results)  # games with turns
    sent = pack(without_specs(results))
    assert isinstance(sent, Packed)
    back = with_specs(unpack(Packed(bytes(sent.data))), specs)
    assert [r.model_dump() for r in back] == expected
    assert all(r.game is s for r, s in zip(back, specs))  # the driver's own specs, not copies
    assert all(t.model is r.game.seats[t.player_id] for r in back for t in r.trajectories)


def test_what_only_cloudpickle_can_carry_is_handed_over_as_it_is(monkeypatch):
    def local(x):
        return x + 1

    assert pack((local,))[0] is local  # a local function: the standard pickler refuses it

    class Defined:  # pickled by reference to __main__, which a Ray worker does not share
        pass

    Defined.__module__, Defined.__qualname__ = "__main__", "DefinedInMain"
    monkeypatch.setattr(sys.modules["__main__"], "DefinedInMain", Defined, raising=False)
    value = Defined()
    assert pack(value) is value
    assert unpack(value) is value
    assert unpack(pack([1, "two"])) == [1, "two"]
