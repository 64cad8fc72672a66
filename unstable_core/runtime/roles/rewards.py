"""The three reward pipelines (final, step, sampling), composed in config order, and the turning
of a finished game into training steps. The core applies them, not the buffer: a buffer stores
and draws steps whose rewards are already final."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ComponentError, describe_error
from ...types import GameResult, Step


class RewardPipelines:
    """Holds the built transforms of each stage. ``labels`` (one per transform, in the order
    final, step, sampling) name a transform that raises."""

    def __init__(self, final: Sequence[Any] = (), step: Sequence[Any] = (), sampling: Sequence[Any] = (),
                 labels: Sequence[str] = ()) -> None:
        self.final_transforms = list(final)
        self.step_transforms = list(step)
        self.sampling_transforms = list(sampling)
        self.labels = dict(zip(map(id, [*final, *step, *sampling]), labels))
        #: the final transforms that take the game's trained seats (a ``train_seats`` parameter)
        self.seat_aware = {id(t) for t in self.final_transforms if takes_train_seats(t)}

    def transforms(self) -> list[Any]:
        """Every transform, in the order final, step, sampling."""
        return [*self.final_transforms, *self.step_transforms, *self.sampling_transforms]

    def _failed(self, transform: Any, exc: Exception) -> ComponentError:
        label = self.labels.get(id(transform), f"reward transform {transform!r}")
        return ComponentError(f"{label} raised {describe_error(exc)}")

    def final(self, rewards: dict[int, float], env_id: str, train_seats: Sequence[int] | None = None) -> dict[int, float]:
        """The final transforms in order; one with a ``train_seats`` parameter (``role-advantage``)
        is also given the seats the learner's model played."""
        for t in self.final_transforms:
            try:
                if train_seats is not None and id(t) in self.seat_aware:
                    rewards = t(dict(rewards), env_id, train_seats=list(train_seats))
                else:
                    rewards = t(dict(rewards), env_id)
            except Exception as exc:
                raise self._failed(t, exc) from exc
        return rewards

    def step(self, step: Step) -> Step:
        for t in self.step_transforms:
            try:
                step = t(step)
            except Exception as exc:
                raise self._failed(t, exc) from exc
        return step

    def sampling(self, steps: list[Step]) -> list[Step]:
        for t in self.sampling_transforms:
            try:
                steps = t(list(steps))
            except Exception as exc:
                raise self._failed(t, exc) from exc
        return steps

    def episodes(self, result: GameResult) -> list[list[Step]]:
        """One list of steps per trained seat of a finished game, final and step transforms
        applied; nothing for a failed game, one without trained seats, or a seat with a turn a
        learner cannot train on (``Turn.trainable`` false: its backend gave no token ids)."""
        if result.outcome == "failed" or not result.game.train_seats:
            return []
        game = result.game
        env_id, group_id = game.env.env_id, game.game_idx if game.group_id is None else game.group_id
        final = self.final(dict(result.rewards), env_id, game.train_seats)
        episodes = []
        for pid in result.game.train_seats:
            turns = result.trajectories[pid].turns
            if not all(t.trainable for t in turns):
                continue
            r = float(final.get(pid, 0.0))
            steps = [
                self.step(Step(env_id=env_id, game_idx=game.game_idx, player_id=pid, turn_index=i, num_turns=len(turns), turn=t,
                               final_reward=r, reward=r, group_id=group_id, group_index=game.group_index))
                for i, t in enumerate(turns)
            ]
            if steps:
                episodes.append(steps)
        return episodes


def takes_train_seats(transform: Any) -> bool:
    """Whether a final transform's call takes a ``train_seats`` argument."""
    import inspect

    try:
        return "train_seats" in inspect.signature(transform).parameters
    except (TypeError, ValueError):  # a callable without a signature Python can read
        return False
