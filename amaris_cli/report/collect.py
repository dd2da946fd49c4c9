"""What the report shows, read from the run's files through the run reader (reader.py), whose figures
`inspect` and `compare` show too.

Two parts: the overview (steps, rubric versions with their diffs, updates with their retrieval,
token usage), small whatever the run's size, and one compact block of rollouts per step, which
the page decodes only when that step is opened. A rollout block interns its texts in a string table
(GRPO groups share inputs and references, judges repeat reasons), so a step of 10,000 rollouts stays
a few megabytes after compression.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import orjson
from pydantic import BaseModel

from amaris_cli import __version__
from amaris_cli.alarms import Alarm, run_alarms
from amaris_cli.artifacts import stale_files
from amaris_cli.errors import InputError
from amaris_cli.figures import VersionFlips
from amaris_cli.hackbench.models import RESULTS, HackbenchReport
from amaris_cli.models import AnalysisRecord, Criterion, Rollout, RubricSet, ScoreRecord
from amaris_cli.reader import RunReader, StepReliability
from amaris_cli.rubrics import criterion_stats
from amaris_cli.rundir import RunDir

TEXT_LIMIT = 6000  # characters of one rollout text kept in the page (head and tail); the run keeps all
SEVERITIES = ("none", "low", "medium", "high")


class CriterionView(BaseModel):
    id: str
    text: str
    kind: Literal["reward", "pitfall"]
    weight: float
    anchor: bool


class FieldChange(BaseModel):
    id: str
    field: Literal["text", "weight", "kind"]
    old: str | float
    new: str | float


class RubricDiff(BaseModel):
    """What changed from the previous version of the same rubric (global or one instance's)."""

    previous: int
    added: list[str]
    removed: list[CriterionView]
    changed: list[FieldChange]


class RubricView(BaseModel):
    instance: str | None
    version: int
    produced_by_step: int | None
    criteria: list[CriterionView]
    diff: RubricDiff | None


class CriterionRate(BaseModel):
    """Mean verdict of one criterion over a step's scored rollouts: the pass rate of a reward
    criterion, the prevalence of a pitfall."""

    id: str
    kind: Literal["reward", "pitfall"]
    n: int
    mean: float
    spread: float


class PatternCount(BaseModel):
    pattern: str
    count: int
    prevalence: float
    known: bool


class RubricKey(BaseModel):
    instance: str | None
    version: int


class StepView(BaseModel):
    step: int
    versions: list[int]
    rubrics: list[RubricKey]  # the rubrics that scored the step (an instance's own, per-instance)
    n: int
    scored: int
    failed: int
    analyzed: int
    mean: float | None
    std: float | None
    histogram: list[int]
    criteria: list[CriterionRate]
    hacking: list[PatternCount]
    summarized: bool
    summary: str | None
    updates: int
    reliability: StepReliability  # the judge reliability check of the step, as `inspect --step` shows it
    stale: list[str] = []  # the step's files edited since written, or made from one that changed (inspect's "stale")


class ValidationView(BaseModel):
    """A step's validation rollouts (serve's /validate), judged in no step: the reader's figures."""

    step: int
    versions: list[int]
    n: int
    scored: int
    failed: int
    mean: float | None
    std: float | None


class AgentUsage(BaseModel):
    agent: str
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    recorded_calls: int
    recorded_prompt_tokens: int
    recorded_completion_tokens: int
    cost: float


class Overview(BaseModel):
    run: str
    version: str
    report_version: str
    replay_of: str | None
    text_limit: int
    priced: bool
    steps: list[StepView]
    validation: list[ValidationView]  # a trainer's evaluation per step (serve's /validate), in no step
    rubrics: list[RubricView]
    updates: list[dict[str, Any]]  # {"update": update.json, "retrieval": retrieval.json or None}
    usage: list[AgentUsage]
    alarms: list[Alarm]  # hacking-onset alarms (alarms.py), as `inspect` lists them
    alarm_checks: list[str]  # the signals the run gave the alarms (none: nothing could be checked)
    hackbench: HackbenchReport | None  # the run is a hack benchmark's (`amaris hackbench`): its results
    reliability: list[VersionFlips]  # each criterion's flip rate per rubric version, over the run (reliability.py)


def _r(x: float, digits: int = 4) -> float:
    return round(x, digits)


def clip_text(text: str, limit: int, where: str) -> str:
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 3 // 4], text[-(limit // 4):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters not shown here; the whole text is in {where} ...]\n{tail}"


def criterion_views(rubric: RubricSet) -> list[CriterionView]:
    anchors = {c.id for c in rubric.anchors}
    return [CriterionView(id=c.id, text=c.text, kind=c.kind, weight=c.weight, anchor=c.id in anchors) for c in rubric.criteria]


def rubric_diff(previous: RubricSet, current: RubricSet) -> RubricDiff:
    before: dict[str, Criterion] = {c.id: c for c in previous.criteria}
    after: dict[str, Criterion] = {c.id: c for c in current.criteria}
    changed = [FieldChange(id=cid, field=f, old=getattr(before[cid], f), new=getattr(c, f))
               for cid, c in after.items() if cid in before
               for f in ("text", "weight", "kind") if getattr(before[cid], f) != getattr(c, f)]
    removed = [v for v in criterion_views(previous) if v.id not in after]
    return RubricDiff(previous=previous.version, added=[cid for cid in after if cid not in before], removed=removed,
                      changed=changed)


def rubric_views(run: RunDir, instances: Iterable[str | None]) -> list[RubricView]:
    views: list[RubricView] = []
    for instance in instances:
        previous: RubricSet | None = None
        for version in run.rubric_versions(instance):
            rubric = run.load_rubric(version, instance)
            views.append(RubricView(instance=instance, version=version, produced_by_step=rubric.produced_by_step,
                                    criteria=criterion_views(rubric),
                                    diff=rubric_diff(previous, rubric) if previous is not None else None))
            previous = rubric
    return views


def criterion_rates(scores: list[ScoreRecord], kinds: dict[str, Literal["reward", "pitfall"]]) -> list[CriterionRate]:
    """Every criterion scored at the step (in a per-instance run, those of every instance's rubric), with
    the arithmetic of stats.json (rubrics.criterion_stats): the page shows the verdicts the scores hold,
    whether or not the step is summarized yet."""
    verdicts: dict[str, list[tuple[str, float]]] = {}
    for s in scores:
        if s.status == "scored":
            for v in s.verdicts:
                verdicts.setdefault(v.criterion_id, []).append((s.rollout_id, v.score))
    rates = []
    for cid, values in verdicts.items():
        c = criterion_stats(cid, kinds.get(cid, "reward"), values)
        assert c.mean is not None and c.spread is not None  # values is never empty
        rates.append(CriterionRate(id=cid, kind=c.kind, n=c.n, mean=c.mean, spread=c.spread))
    return rates


def step_view(reader: RunReader, step: int, kinds: dict[str, Literal["reward", "pitfall"]],
              rubrics: list[tuple[str | None, int]]) -> StepView:
    """The step as the page shows it: the reader's overview (the figures `inspect` shows), the rubrics
    that scored it and its per-criterion rates."""
    view = reader.overview(step)
    r = view.rewards
    return StepView(step=step, versions=view.rubric_versions,
                    rubrics=[RubricKey(instance=i, version=v) for i, v in rubrics], n=r.n, scored=r.scored,
                    failed=r.failed, analyzed=view.analyzed, mean=r.mean, std=r.std, histogram=r.histogram,
                    criteria=criterion_rates(reader.scores(step), kinds),
                    hacking=[PatternCount(**h.model_dump()) for h in view.hacking], summarized=view.summarized,
                    summary=view.summary, updates=view.updates, reliability=reader.step_reliability(step),
                    stale=stale_files(reader.run, step) if view.state == "stale" else [])


class Strings:
    """A string table: every distinct text once, referenced by index."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.index: dict[str, int] = {}

    def __call__(self, text: str | None) -> int:
        if text is None:
            return -1
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.items)
            self.items.append(text)
        return found


def rollout_block(step: int, rollouts: list[Rollout], scores: list[ScoreRecord], analyses: list[AnalysisRecord],
                  text_limit: int) -> dict[str, Any]:
    """The step's rollouts for the page. Layout (keys omitted when empty; numbers index `strings`):
    {"strings": [...], "criteria": [criterion ids], "rollouts": [{
      "id", "in", "out", "ref", "inst", "meta": input, output, reference, instance, metadata as JSON,
      "v": rubric version, "st": 1 scored / 0 failed / -1 not scored, "r": reward, "err": error,
      "vd": [criterion index, verdict, reason, ...],
      "an": {"ok": 1/0, "err", "as": assessment, "sp": stage performance, "adv": advancement strategy,
             "hk": [pattern, severity 0-3, evidence, ...], "rj": rubric judgement, "mis": 1 if misjudged,
             "miss": [missing criteria], "obs": [observations]}}]}"""
    strings = Strings()
    criteria: dict[str, int] = {}
    where = f"steps/{step:06d}/rollouts.jsonl"
    by_score = {s.rollout_id: s for s in scores}
    by_analysis = {a.rollout_id: a for a in analyses}
    ids = [r.id for r in rollouts] or [s.rollout_id for s in scores]
    texts = {r.id: r for r in rollouts}
    rows: list[dict[str, Any]] = []
    for rid in ids:
        row: dict[str, Any] = {"id": rid}
        rollout = texts.get(rid)
        if rollout is not None:
            row["in"] = strings(clip_text(rollout.input, text_limit, where))
            row["out"] = strings(clip_text(rollout.output, text_limit, where))
            if rollout.supplemental_context is not None:
                row["ref"] = strings(clip_text(rollout.supplemental_context, text_limit, where))
            if rollout.instance_id is not None:
                row["inst"] = strings(rollout.instance_id)
            if rollout.metadata:
                row["meta"] = strings(orjson.dumps(rollout.metadata, option=orjson.OPT_SORT_KEYS).decode())
        score = by_score.get(rid)
        row["st"] = -1 if score is None else int(score.status == "scored")
        if score is not None:
            row["v"] = score.rubric_version
            if score.instance_id is not None and "inst" not in row:
                row["inst"] = strings(score.instance_id)
            # as stored (6 decimals): rounded to 4 here and to 3 on the page, 0.31246 read 0.313 (0.3125 -> 0.313), where
            # `amaris rewards` gives 0.31246 and every reader rounds once to 0.312
            if score.reward is not None:
                row["r"] = score.reward
            if score.error:
                row["err"] = strings(score.error)
            flat: list[Any] = []
            for v in score.verdicts:
                flat += [criteria.setdefault(v.criterion_id, len(criteria)), v.score, strings(v.reason)]
            if flat:
                row["vd"] = flat
        analysis = by_analysis.get(rid)
        if analysis is not None:
            row["an"] = analysis_block(analysis, strings)
        rows.append(row)
    return {"strings": strings.items, "criteria": list(criteria), "rollouts": rows}


def analysis_block(record: AnalysisRecord, strings: Strings) -> dict[str, Any]:
    a = record.analysis
    if a is None:
        return {"ok": 0, "err": strings(record.error or "no analysis")}
    block: dict[str, Any] = {"ok": 1, "as": strings(a.overall_assessment), "sp": strings(a.stage_performance),
                             "adv": strings(a.advancement_strategy), "rj": strings(a.rubric_judgement.assessment)}
    flags: list[int] = []
    for p in a.reward_hacking.found:
        flags += [strings(p.pattern), SEVERITIES.index(p.severity), strings(p.evidence)]
    if flags:
        block["hk"] = flags
    if a.rubric_judgement.misjudged:
        block["mis"] = 1
    if a.rubric_judgement.missing_criteria:
        block["miss"] = [strings(m) for m in a.rubric_judgement.missing_criteria]
    if a.observations:
        block["obs"] = [strings(o) for o in a.observations]
    return block


def _hackbench(run: RunDir) -> HackbenchReport | None:
    path = run.path / RESULTS
    if not path.exists():
        return None
    try:
        return HackbenchReport.model_validate_json(path.read_bytes())
    except ValueError as exc:
        raise InputError(path, f"not the results of `amaris hackbench`: {str(exc).splitlines()[0]}") from None


def collect(run: RunDir, text_limit: int = TEXT_LIMIT) -> tuple[Overview, dict[int, dict[str, Any]]]:
    """The overview and {step: rollout block}."""
    reader = RunReader(run)
    manifest, settings, steps = reader.manifest, reader.settings, reader.steps
    instances: list[str | None] = [None]
    steps_out: list[StepView] = []
    blocks: dict[int, dict[str, Any]] = {}
    updates: list[dict[str, Any]] = []
    rubric_cache: dict[tuple[str | None, int], RubricSet] = {}

    def rubrics_for(step: int) -> list[tuple[str | None, int]]:
        keys = reader.scoring_rubrics(step)
        for key in set(keys) - rubric_cache.keys():
            rubric_cache[key] = run.load_rubric(key[1], key[0])
        return keys

    for step in steps:
        scores, analyses = reader.scores(step), reader.analyses(step)
        for s in scores:
            if s.instance_id is not None and s.instance_id not in instances:
                instances.append(s.instance_id)
        used = rubrics_for(step)
        kinds = {c.id: c.kind for key in used for c in rubric_cache[key].criteria}
        steps_out.append(step_view(reader, step, kinds, used))
        blocks[step] = rollout_block(step, reader.rollouts(step), scores, analyses, text_limit)
        for summary in reader.summaries(step):
            update = reader.update(step, summary.instance_id)
            if update is None:
                continue
            retrieval = reader.retrieval(step, summary.instance_id)
            updates.append({"update": update.model_dump(mode="json"),
                            "retrieval": retrieval.model_dump(mode="json") if retrieval else None})
    rubric_instances = [i for i in instances if i is None or run.rubric_versions(i)]
    agents = reader.usage_by_agent()
    usage = [AgentUsage(agent=agent, model_calls=int(u["model_calls"]), prompt_tokens=int(u["prompt_tokens"]),
                        completion_tokens=int(u["completion_tokens"]), recorded_calls=int(u["replayed"]),
                        recorded_prompt_tokens=int(u["recorded_prompt_tokens"]),
                        recorded_completion_tokens=int(u["recorded_completion_tokens"]), cost=_r(u["cost"], 6))
             for agent, u in agents.items()]
    validation = [ValidationView(step=v.step, versions=v.rubric_versions, n=v.rewards.n, scored=v.rewards.scored,
                                 failed=v.rewards.failed, mean=v.rewards.mean, std=v.rewards.std)
                  for v in map(reader.validation, reader.validation_steps) if v is not None]
    alarm_report = run_alarms(reader)
    checks = [name for name, on in (("judge reward against the verifiable reward", alarm_report.gold),
                                    ("hacking patterns' prevalence", any(s.n_analyzed for s in alarm_report.steps))) if on]
    overview = Overview(run=str(run.path), version=manifest.version, report_version=__version__,
                        replay_of=manifest.replay_of, text_limit=text_limit, priced=bool(settings.prices),
                        steps=steps_out, validation=validation, rubrics=rubric_views(run, rubric_instances),
                        updates=updates, usage=usage,
                        alarms=alarm_report.alarms, alarm_checks=checks, hackbench=_hackbench(run),
                        reliability=reader.flip_rates())
    return overview, blocks
