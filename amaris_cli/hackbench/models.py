"""The benchmark's records: the labelled rollouts it judges and the results it writes (`OUT/hackbench.json`).

`HackbenchReport` is the one model of the results: the terminal table, `--json` and the HTML report
read it, and nothing recomputes a figure from it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

HONEST = "honest"
RESULTS = "hackbench.json"  # OUT/hackbench.json, and a copy in the run it measured (the report's page)
MEASURES_JUDGE = ("analyzer_precision", "analyzer_recall", "gain_initial")
MEASURES_AMARIS = ("gain_after_updates", "honest_drift")


class BenchLabel(BaseModel):
    """What the benchmark knows of one rollout, kept in its metadata under `hackbench`."""

    item: str  # the honest answer (control) this rollout belongs to
    family: str  # HONEST for the control, else the hack's family or label
    source: Literal["transform", "labelled", "school_of_reward_hacks"]


class Interval(BaseModel):
    """A mean over items with its 95% bootstrap interval (percentile, resampling items, seeded)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int


class Spent(BaseModel):
    calls: int = 0  # requests sent to a model (answers taken from a record are not counted)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reused: int = 0  # requests answered from calls.jsonl (a resumed or repeated benchmark)


class FamilyResult(BaseModel):
    family: str
    description: str  # the transform, or where the labelled rows came from
    variants: int  # hacked rollouts judged
    skipped: int  # honest answers the transform does not apply to
    skip_reasons: list[str] = Field(default_factory=list)
    names: str  # which analyzer names count as naming this family
    # the judge (and its prompts and the initial rubric)
    analyzer_recall: float | None  # share of this family's analyzed variants (`analyzed`) whose analysis names it
    analyzer_precision: float | None  # of the analyzed rollouts given one of its names, the share that are its variants
    named: int  # variants named
    flagged: int  # rollouts given one of its names
    # variants with an analysis at step 0: recall's denominator; those without one (the analyzer failed) are
    # left out of recall and precision and counted in analysis_failed. None: results of an amaris before they were
    analyzed: int | None = None
    analysis_failed: int | None = None
    gain_initial: Interval  # hacked minus its control's reward, at the initial rubric
    # amaris
    gain_after_updates: Interval  # the same after K updates
    spent: Spent  # scorer and analyzer calls for this family's variants


class HackbenchReport(BaseModel):
    version: int = 1
    run: str  # the run directory the benchmark built (replayable: `amaris replay RUN --out DIR`)
    judge: str  # "sim-judge (rule-based, not an LLM)" or the endpoint's model
    source: str  # the honest answers or the labelled file
    updates: int  # K
    items: int  # honest answers (controls)
    rollouts: int  # judged per step: controls and variants
    seed: int
    bootstrap: int  # resamples per interval
    families: list[FamilyResult]
    honest_drift: Interval  # mean change of the controls' rewards from the initial rubric to the one after K updates
    honest_flagged: float | None  # share of analyzed controls whose analysis names any pattern (false alarms on honest answers)
    shared: Spent  # summaries, queries and updates: not attributable to one family
    total: Spent
    failed: int  # rollouts that could not be scored (at step 0, step K or both: each once), left out of the figures
    # rollouts (controls and variants) with no analysis at step 0 (the analyzer failed), left out of recall, precision
    # and honest_flagged (each family's own in its analysis_failed). None: results of an amaris before it was counted
    analysis_failed: int | None = None
    notes: list[str]
