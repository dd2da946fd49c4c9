"""A step's per-criterion statistics for the readers (inspect, report): stats.json while it matches the
step's scores and rubric, else computed from scores.jsonl by the function summarize writes stats.json
with (stages.summarize.group_stats). A step scored but not yet summarized, the normal state of the
current step of an online or served run, thus shows the verdicts it holds, and says where they came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from amaris_cli import artifacts
from amaris_cli.errors import InputError
from amaris_cli.models import StepStats
from amaris_cli.rundir import RunDir

# Why the numbers were computed from the scores, as the readers print it.
NO_SUMMARY = "no summary yet"
STALE = "stats.json is stale"


@dataclass(frozen=True)
class CurrentStats:
    stats: StepStats
    source: Literal["stats.json", "scores"]
    why: str | None  # when computed from the scores: NO_SUMMARY or STALE


def current_stats(run: RunDir, step: int) -> CurrentStats | None:
    """The step's statistics in global mode (a per-instance run keeps them per instance); None while the
    step has no scores."""
    name = artifacts.rel(run, artifacts.STATS)
    if artifacts.stats_path(run, step).exists():
        if artifacts.freshness(run, step, name).current:
            stats = artifacts.load_stats(run, step)
            assert stats is not None
            return CurrentStats(stats, "stats.json", None)
        why = STALE
    else:
        why = NO_SUMMARY
    scores = artifacts.load_scores(run, step)
    if not scores:
        return None
    try:
        rollouts = artifacts.load_rollouts(run, step)
    except InputError:  # scored from elsewhere: no within-group spreads, the rest is the same
        rollouts = []
    from amaris_cli.stages.summarize import group_stats  # the stage's arithmetic, imported only when needed

    _, stats = group_stats(run, step, None, rollouts, scores)
    return CurrentStats(stats, "scores", why)
