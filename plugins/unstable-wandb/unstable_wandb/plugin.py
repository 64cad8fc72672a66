"""Registers the `wandb` tracker. wandb itself is imported when a run builds the tracker."""

from __future__ import annotations

from typing import Any

from unstable_core import BuildContext, TrackerSpec, hookimpl

from .options import WandbOptions


def make_tracker(options: WandbOptions, ctx: BuildContext) -> Any:
    from .tracker import WandbTracker

    return WandbTracker(options, ctx)


@hookimpl
def unstable_trackers() -> list[TrackerSpec]:
    return [TrackerSpec(name="wandb", summary="Weights & Biases: metrics, evaluations, ratings, a transcripts table",
                        config=WandbOptions, transcripts="transcripts", factory=make_tracker)]
