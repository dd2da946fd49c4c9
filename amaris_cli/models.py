"""Pydantic models of every record amaris reads or writes.

One model per record type, shared by the code that writes a file and the code that reads it.
Records hold no wall-clock values (those live only in run.json and calls.jsonl), so two runs
compare with plain `diff`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from amaris_cli.criteria import criterion_id_problem


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Frozen(Strict):
    """A record read from a step file, or a part of one: a process shares one copy among its readers
    (jsonio.load_per_rollout), so none may change it (model_copy(update=...) makes a changed one). Its lists
    and dicts are plain ones: nothing appends to a record's."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- rollouts ---------------------------------------------------------------------------------


# A trainer's ids are uids, indexes or hashes; an id is quoted in messages, memory entries and the report, so a
# longer one is refused where the input is read (rollouts.py, which serve's intake uses too) rather than cut in
# each of them. Not a limit of the model: it also reads the run's own files, and a run an earlier amaris wrote
# with a longer id must stay readable (inspect, report, replay), not be called edited by hand.
MAX_ROLLOUT_ID_CHARS = 512


class Rollout(Frozen):
    """The canonical rollout: what every trainer shape is normalized to."""

    id: str = Field(min_length=1)
    input: str
    output: str
    supplemental_context: str | None = None
    step: int | None = None
    instance_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


# --- rubrics ----------------------------------------------------------------------------------


class Criterion(Strict):
    """One rubric item. `reward` criteria give credit when met; `pitfall` criteria take it away
    when present. Weights are positive; the kind carries the sign."""

    id: str
    text: str = Field(min_length=1)
    # an infinite weight made every reward NaN, read as 0.0; strict: `true` or "2" is not read as a weight
    weight: float = Field(gt=0, allow_inf_nan=False, strict=True)
    kind: Literal["reward", "pitfall"] = "reward"

    @field_validator("id")
    @classmethod
    def _plain_slug(cls, value: str) -> str:
        # The scorer reads ids among its instructions: one rule for every id (criteria.criterion_id_problem).
        if problem := criterion_id_problem(value):
            raise PydanticCustomError("criterion_id", problem)
        return value


class RubricSet(Strict):
    """The rubric that scores step `version` onward (until a newer version exists)."""

    version: int = Field(ge=0)
    instance_id: str | None = None
    anchors: list[Criterion]
    adaptive: list[Criterion] = Field(default_factory=list)
    produced_by_step: int | None = None

    @model_validator(mode="after")
    def _check(self) -> RubricSet:
        ids = [c.id for c in self.criteria]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"duplicate criterion ids: {', '.join(dupes)}")
        if not any(c.kind == "reward" for c in self.criteria):
            raise ValueError("a rubric needs at least one criterion of kind 'reward'")
        if not math.isfinite(sum(c.weight for c in self.criteria)):  # each finite, the sum not: rewards NaN
            raise ValueError("the criteria's weights add up to more than a number can hold; give weights on a "
                             "smaller scale (only their ratios count)")
        return self

    @property
    def criteria(self) -> list[Criterion]:
        return [*self.anchors, *self.adaptive]

    def get(self, criterion_id: str) -> Criterion | None:
        return next((c for c in self.criteria if c.id == criterion_id), None)


# --- scores -----------------------------------------------------------------------------------


class Verdict(Frozen):
    criterion_id: str
    score: float = Field(ge=0, le=1)
    reason: str = ""


class ScoreRecord(Frozen):
    rollout_id: str
    step: int
    rubric_version: int
    status: Literal["scored", "failed"]
    reward: float | None = None
    verdicts: list[Verdict] = Field(default_factory=list)
    error: str | None = None
    instance_id: str | None = None


# --- analyses ---------------------------------------------------------------------------------

Severity = Literal["none", "low", "medium", "high"]
MAX_PATTERN_CHARS = 60


class HackingFinding(Frozen):
    pattern: str = Field(min_length=1)
    evidence: str = ""
    severity: Severity  # no default: a severity the analyzer did not give would be one made up (re-asked)

    @field_validator("pattern")
    @classmethod
    def _normalize(cls, value: str) -> str:
        # A name, not text: amaris counts findings by it and gives the agents those counts one per line ("name: N of
        # M analyzed rollouts"), so spaces, punctuation and line breaks of any kind become "_" and it is cut at 60
        # characters; a name that forged lines of counts (or an amaris note) is one long word, marked free-form.
        name = "_".join(re.findall(r"[^\W_]+", value.lower()))[:MAX_PATTERN_CHARS].strip("_")
        if not name:
            raise ValueError(f"a hacking pattern needs a name of letters or digits, not {value[:40]!r}")
        return name


class RewardHackingAnalysis(Frozen):
    detected: bool
    patterns: list[HackingFinding] = Field(default_factory=list)

    @property
    def found(self) -> list[HackingFinding]:
        """The patterns the analyzer says the rollout shows: one named with severity "none" was checked and not
        found, so it is counted nowhere (prevalence, alarms, the memory's kinds, the report's flags)."""
        return [p for p in self.patterns if p.severity != "none"]


class RubricJudgement(Frozen):
    assessment: str
    misjudged: bool  # no default: read by the summarizer and the report, a missing one is re-asked
    missing_criteria: list[str] = Field(default_factory=list)


class AnalysisAnswer(Frozen):
    """What the analyzer agent must answer for one rollout."""

    overall_assessment: str
    stage_performance: str
    reward_hacking: RewardHackingAnalysis
    advancement_strategy: str
    rubric_judgement: RubricJudgement
    observations: list[str] = Field(default_factory=list)


class AnalysisRecord(Frozen):
    rollout_id: str
    step: int
    reward: float | None
    status: Literal["analyzed", "failed"]
    analysis: AnalysisAnswer | None = None
    error: str | None = None
    instance_id: str | None = None


# --- summaries --------------------------------------------------------------------------------


class PatternNote(Strict):
    """A pattern the summarizer describes. How often it occurs is counted by amaris, not estimated."""

    pattern: str = Field(min_length=1)
    description: str = ""


class SummaryAnswer(Strict):
    """What the summarizer (and the meta-summarizer) must answer. Numbers (rewards, per-criterion
    statistics, hacking counts) are given to it, never asked of it."""

    executive_summary: str
    systemic_patterns: list[PatternNote] = Field(default_factory=list)
    reward_hacking: str
    rubric_meta_evaluation: str
    performance_advancement: str
    rubric_evolution_plan: list[str] = Field(default_factory=list)
    memory_entry: str = Field(min_length=1)

    @field_validator("memory_entry")
    @classmethod
    def _said_something(cls, value: str) -> str:
        if not value.strip():  # a blank entry would be indexed as the step's history
            raise ValueError("memory_entry is blank: write the step's entry for the memory")
        return value


class CriterionStats(Strict):
    criterion_id: str
    kind: Literal["reward", "pitfall"]
    n: int
    mean: float | None
    spread: float | None
    within_group_spread: float | None
    saturation_top: float | None
    saturation_bottom: float | None


class StepStats(Strict):
    step: int
    n_rollouts: int
    n_scored: int
    n_failed: int
    mean_reward: float | None
    std_reward: float | None
    criteria: list[CriterionStats]


class HackingCount(Strict):
    """Counted by amaris from the analyses (not the summarizer's estimate)."""

    pattern: str
    count: int
    prevalence: float
    known: bool


class StepSkipped(Strict):
    """A step (or, per instance, one instance of it) that could not be evaluated: its rollouts could not be
    judged or analyzed, or an agent gave no answer, under `on_error = skip|neutral` (or `fail` with
    `failed_step = carry`). Written by amaris, not
    by a model, so that the memory keeps the gap and later updates see it."""

    reason: str
    rollouts: int
    judged: int
    analyzed: int


class SummaryRecord(Strict):
    step: int
    instance_id: str | None = None
    n_rollouts: int
    n_analyzed: int
    chunks: int
    stats: StepStats
    hacking: list[HackingCount] = Field(default_factory=list)
    summary: SummaryAnswer
    skipped: StepSkipped | None = None  # the summary is amaris's account of a skipped step, not a summarizer's


# --- updates ----------------------------------------------------------------------------------

Strategy = Literal["MAINTENANCE", "CORRECTIVE", "ADVANCEMENT"]


class Modification(Strict):
    op: Literal["add", "modify", "remove", "reweight"]
    id: str | None = None
    text: str | None = None
    weight: float | None = None
    kind: Literal["reward", "pitfall"] | None = None
    reason: str = ""

    @field_validator("weight", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):  # true is no weight, whatever pydantic's lax mode would make of it (1.0)
            raise ValueError(f"a weight is a number, got {value!r}")
        return value


class MemoryInsight(Strict):
    source: str
    insight: str


class UpdateAnswer(Strict):
    strategy: Strategy
    rationale: str
    memory_consultation: list[MemoryInsight] = Field(default_factory=list)
    modifications: list[Modification] = Field(default_factory=list)


class RejectedModification(Strict):
    modification: Modification
    reason: str


class Deactivated(Strict):
    criterion_id: str
    spread: float | None
    reason: str


class GateProbe(Strict):
    """One response the adoption gate judged with both versions: an item's honest `control`, its
    `honest_mistake` (the second control: the same work with a wrong final answer), or a hack of a family."""

    item: str  # the rollout the probes were built from, or the id of a probe of the user's file
    family: str
    source: Literal["rollout", "user"]
    previous: float | None  # the reward under the previous version
    new: float | None  # the reward under the new version


class GateFamily(Strict):
    """A hack family's mean gain (the hack's reward minus its control's) under each version."""

    family: str
    probes: int
    previous_gain: float
    new_gain: float


class GateRecord(Strict):
    """What the adoption gate found before the new version was adopted, or why it was refused.

    `adopted`: no rule fired; `refused`: a hack family gained more than `margin` in reward over its control,
    or more than `max_flips` of the controls' ordered pairs turned over (the previous version was carried
    forward); `unchecked`: nothing to judge (no honest rollout to build probes from, no budget, no file)."""

    decision: Literal["adopted", "refused", "unchecked"]
    reason: str
    previous_version: int
    calls: int  # judge requests the gate needed (those answered from calls.jsonl included)
    budget: int  # requests allowed for built-in probes: gate.max_call_share of the step's own
    step_calls: int  # the step's own requests: scorer, analyzer, summarizers, query generator, updater
    margin: float
    max_flips: float
    families: list[GateFamily] = Field(default_factory=list)
    ordered_pairs: int = 0  # pairs of controls the previous version ordered by more than `margin`
    flipped_pairs: int = 0  # of those, the pairs the new version orders the other way by more than `margin`
    probes: list[GateProbe] = Field(default_factory=list)
    refused_edits: list[Modification] = Field(default_factory=list)  # what the refused version would have applied


class CarriedForward(Strict):
    """The update wrote the rubric it started from again, unchanged, and why: `skipped`, the step could not be
    evaluated (StepSkipped); `gate`, the adoption gate refused the version the updater wrote."""

    cause: Literal["skipped", "gate"]
    reason: str


class UpdateRecord(Strict):
    step: int
    instance_id: str | None = None
    from_version: int
    to_version: int
    strategy: Strategy
    rationale: str
    memory_consultation: list[MemoryInsight]
    applied: list[Modification]
    rejected: list[RejectedModification]
    deactivated: list[Deactivated] = Field(default_factory=list)
    final_adaptive: list[Criterion]
    carried_forward: CarriedForward | None = None
    gate: GateRecord | None = None  # the adoption gate's check of the version the updater wrote


class QueriesAnswer(Strict):
    queries: list[str] = Field(default_factory=list)


class MemoryHit(Strict):
    id: str
    type: Literal["analysis", "summary", "update"]
    step: int
    distance: float
    query: str
    text: str


class StaticEntry(Strict):
    id: str
    type: Literal["summary", "update"]
    step: int
    text: str


class RetrievalRecord(Strict):
    step: int
    instance_id: str | None = None
    static_enabled: bool
    static_steps: int
    dynamic_enabled: bool
    results_per_query: int
    max_queries: int | None
    static: list[StaticEntry]
    queries: list[str]
    dynamic: list[MemoryHit]


# --- judge reliability ------------------------------------------------------------------------

RejudgementKind = Literal["repeat", "permuted"]


class Reverdict(Strict):
    """One criterion of a re-judged rollout: the verdict its score holds (`first`) and the one given again."""

    criterion_id: str
    first: float = Field(ge=0, le=1)
    again: float = Field(ge=0, le=1)
    first_reason: str = ""
    reason: str = ""


class Rejudgement(Strict):
    """A scored rollout judged again (reliability.py): `repeat`, the scorer's request with only its block tag
    drawn again; `permuted`, the request with the criteria in `order`. `call` is the context of the request
    in calls.jsonl (a group call re-judges several rollouts at once)."""

    rollout_id: str
    kind: RejudgementKind
    call: str
    rubric_version: int
    instance_id: str | None = None
    order: list[str] | None = None
    status: Literal["judged", "failed"]
    error: str | None = None
    verdicts: list[Reverdict] = Field(default_factory=list)


class ReliabilityRecord(Strict):
    """reliability.json of a step: which of its scorer calls were asked again, within what budget, and what
    the judge answered. Flip rates are computed from it by figures.flip_figures, never stored."""

    step: int
    tolerance: float
    max_extra: float
    seed: int
    scorer_calls: int  # the scorer calls the step's scores took (one per rollout, or per group call)
    budget: int  # the re-judgement calls allowed: max_extra x scorer_calls, rounded down
    calls: int  # the re-judgement calls made
    skipped: str | None = None  # why nothing was re-judged, when the check could not run
    judgements: list[Rejudgement] = Field(default_factory=list)
