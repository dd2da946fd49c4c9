"""Stage 3: per-criterion statistics, the hacking counts and the step summary (per chunk, merged by
the meta-summarizer when the step is large), and indexing the step's analyses and summary in the memory.

stats.json and summary.json are reused only while their inputs (scores, analyses, rubric files,
prompts, settings) are unchanged; re-scoring a step makes them stale and they are recomputed."""

from __future__ import annotations

from typing import Any

from amaris_cli import artifacts
from amaris_cli.agents.summarizer import merge_chunks, summarize_chunk
from amaris_cli.errors import AgentFailed, AmarisError
from amaris_cli.jsonio import write_json_atomic
from amaris_cli.memory.service import RunCatalog, in_thread, index_step
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import (
    AnalysisRecord,
    Rollout,
    RubricSet,
    ScoreRecord,
    StepSkipped,
    StepStats,
    SummaryAnswer,
    SummaryRecord,
)
from amaris_cli.policy import NotEvaluated
from amaris_cli.rollouts import group_by_instance
from amaris_cli.rubrics import step_stats
from amaris_cli.rundir import RunDir
from amaris_cli.session import Session
from amaris_cli.stages.common import (
    StageOutcome,
    Upstream,
    agent_inputs,
    analyses_sha,
    bounded_map,
    require_sha,
    rubric_inputs,
    training_inputs,
)
from amaris_cli.stages.score import rubric_for
from amaris_cli.vocabulary import count_hacking


def _groups(session: Session, rollouts: list[Rollout]) -> dict[str | None, list[Rollout]]:
    # A step with no rollouts (an outage) has no instances: one summary of the whole step says so.
    if not session.settings.pipeline.per_instance or not rollouts:
        return {None: rollouts}
    return dict(group_by_instance(rollouts))


def summary_inputs(session: Session, step: int, rubric: RubricSet, not_evaluated: str | None = None,
                   seen: Upstream | None = None) -> dict[str, Any]:
    """`seen`: the stage's view of the step's upstream files (stages/common.py)."""
    run, pipeline = session.run, session.settings.pipeline
    inputs = {
        "rollouts": require_sha(run, step, artifacts.ROLLOUTS, "run `amaris score` first", seen),
        "scores": require_sha(run, step, artifacts.SCORES, "run `amaris score` first", seen),
        "analyses": analyses_sha(run, step, skipped=not_evaluated is not None, seen=seen),
        "rubrics": rubric_inputs(run, [rubric]),
        "agents": agent_inputs(session, "summarizer", "meta_summarizer"),
        "chunking": {"chunk_size": pipeline.chunk_size, "merge_fan_in": pipeline.merge_fan_in},
        **training_inputs(session, step=step),
    }
    if not_evaluated is not None:
        inputs["not_evaluated"] = not_evaluated
    return inputs


def scoring_rubric(run: RunDir, instance_id: str | None, scores: list[ScoreRecord]) -> RubricSet:
    """The rubric whose verdicts a group's statistics are of: the version of its first score (in input order)."""
    return rubric_for(run, scores[0].rubric_version, instance_id, exact=True)


def group_stats(run: RunDir, step: int, instance_id: str | None, rollouts: list[Rollout],
                scores: list[ScoreRecord]) -> tuple[RubricSet, StepStats]:
    """What stats.json holds for a group (the step, or one instance in per-instance mode), computed from
    its scores with the rubric that scored them; within-group spreads over rollouts sharing a prompt.
    Readers (inspect, report) call it too while a step has no fresh stats.json, so the numbers they show
    are the ones summarize will write."""
    rubric = scoring_rubric(run, instance_id, scores)
    groups = {r.id: key for key, members in group_by_instance(rollouts).items() for r in members}
    return rubric, step_stats(step, rubric, scores, groups)


def _write_stats(session: Session, step: int, instance_id: str | None, rubric: RubricSet, stats: StepStats,
                 seen: Upstream) -> None:
    run = session.run
    name = artifacts.rel(run, artifacts.STATS, instance_id)
    inputs = {"rollouts": seen.freshness(artifacts.ROLLOUTS).sha, "scores": seen.freshness(artifacts.SCORES).sha,
              "rubrics": rubric_inputs(run, [rubric])}
    if not artifacts.freshness(run, step, name).made_from(inputs):
        artifacts.write_json_recorded(run, step, name, stats.model_dump(mode="json"), inputs, session.how)


def _empty_stats(run: RunDir, step: int, instance_id: str | None) -> tuple[RubricSet, StepStats]:
    """A step with no rollouts (an outage) has no verdicts: its empty statistics are of the rubric it carries."""
    rubric = rubric_for(run, step, instance_id)
    return rubric, step_stats(step, rubric, [])


async def _summarize_group(session: Session, step: int, instance_id: str | None, rollouts: list[Rollout],
                           scores: dict[str, ScoreRecord], analyses: dict[str, AnalysisRecord],
                           force: bool, not_evaluated: str | None, seen: Upstream) -> bool:
    """Write the group's stats and summary; True when the summary was (re)computed."""
    run = session.run
    ids = [r.id for r in rollouts]
    group_scores = [scores[i] for i in ids if i in scores]
    if not group_scores and (rollouts or not_evaluated is None):
        raise AmarisError(f"{artifacts.scores_path(run, step)}: no scores for {instance_id or 'the step'}")
    rubric, stats = (group_stats(run, step, instance_id, rollouts, group_scores) if group_scores else
                     _empty_stats(run, step, instance_id))
    _write_stats(session, step, instance_id, rubric, stats, seen)
    name = artifacts.rel(run, artifacts.SUMMARY, instance_id)
    inputs = summary_inputs(session, step, rubric, not_evaluated, seen)
    if not force and artifacts.freshness(run, step, name).made_from(inputs):
        return False
    analyzed = [analyses[i] for i in ids if i in analyses and analyses[i].status == "analyzed"]
    for stale in run.step_dir(step).glob(artifacts.rel(run, "summary.chunk-*.json", instance_id)):
        stale.unlink()
    scope = f"step {step}" + (f", instance {instance_id}" if instance_id is not None else "")
    if not_evaluated is not None:
        record = skipped_summary(step, instance_id, len(rollouts), stats, analyzed, not_evaluated)
    else:
        try:
            if not analyzed:
                failed = [analyses[i] for i in ids if i in analyses and analyses[i].status != "analyzed"]
                first = f"; first: {failed[0].error}" if failed and failed[0].error else ""
                raise AgentFailed(f"no rollout of {scope} could be analyzed{first}")
            summary, chunks = await _summary_of(session, step, instance_id, rubric, stats, analyzed, inputs)
            record = SummaryRecord(step=step, instance_id=instance_id, n_rollouts=len(rollouts),
                                   n_analyzed=len(analyzed), chunks=chunks, stats=stats,
                                   hacking=count_hacking(analyzed), summary=summary)
        except AgentFailed as exc:
            if not session.policy.skips_failed_steps:
                raise
            record = skipped_summary(step, instance_id, len(rollouts), stats, analyzed, str(exc))
    artifacts.write_json_recorded(run, step, name, record.model_dump(mode="json"), inputs, session.how)
    return True


async def _summary_of(session: Session, step: int, instance_id: str | None, rubric: RubricSet, stats: StepStats,
                      analyzed: list[AnalysisRecord], inputs: dict[str, Any]) -> tuple[SummaryAnswer, int]:
    """The summarizer's answer for a group's analyses (in chunks merged by the meta-summarizer when large),
    and the number of chunks; AgentFailed when an agent gives no answer."""
    run, kit = session.run, session.kit
    hacking = count_hacking(analyzed)
    size = session.settings.pipeline.chunk_size
    chunks = [analyzed[i : i + size] for i in range(0, len(analyzed), size)]
    if len(chunks) == 1:
        answer = await summarize_chunk(kit, rubric, step, chunks[0], stats, hacking, "all rollouts")
        if answer.value is None:
            raise AgentFailed(f"step {step}: the summarizer failed: {answer.error}; re-run to retry")
        summary: SummaryAnswer = answer.value
    else:
        written: list[str] = []

        async def chunk_summary(index: int) -> tuple[int, SummaryAnswer]:
            chunk = chunks[index]
            answer = await summarize_chunk(kit, rubric, step, chunk, stats, count_hacking(chunk),
                                           f"chunk {index + 1} of {len(chunks)}")
            if answer.value is None:
                raise AgentFailed(f"step {step}: the summarizer failed on chunk {index + 1}: {answer.error}; "
                                  "re-run to retry")
            name = artifacts.rel(run, artifacts.chunk_name(index), instance_id)
            write_json_atomic(run.step_dir(step) / name,
                              {"chunk": index, "n": len(chunk), "rollout_ids": [a.rollout_id for a in chunk],
                               "summary": answer.value.model_dump(mode="json")})
            written.append(name)
            return len(chunk), answer.value

        try:
            parts = await bounded_map(list(range(len(chunks))), chunk_summary,
                                      kit.settings.agent("summarizer").concurrency)
        finally:  # the chunks written, also when another failed: one rewrite of provenance.json for them all
            artifacts.record_many(run, step, sorted(written), inputs, session.how)
        # Merge at most merge_fan_in summaries per call, level by level, so a prompt stays bounded
        # however large the step (10,000 rollouts in chunks of 32: 313 -> 20 -> 2 -> 1).
        fan_in = session.settings.pipeline.merge_fan_in
        while len(parts) > 1:
            levels = [parts[i : i + fan_in] for i in range(0, len(parts), fan_in)]

            async def merge(group: list[tuple[int, SummaryAnswer]]) -> tuple[int, SummaryAnswer]:
                if len(group) == 1:
                    return group[0]
                merged = await merge_chunks(kit, rubric, step, group, stats, hacking, len(analyzed))
                if merged.value is None:
                    raise AgentFailed(f"step {step}: the meta-summarizer failed: {merged.error}; re-run to retry")
                return sum(n for n, _ in group), merged.value

            parts = await bounded_map(levels, merge, kit.settings.agent("meta_summarizer").concurrency)
        summary = parts[0][1]
    return summary, len(chunks)


def skipped_summary(step: int, instance_id: str | None, n_rollouts: int, stats: StepStats,
                analyzed: list[AnalysisRecord], reason: str) -> SummaryRecord:
    """amaris's own summary of a group that could not be evaluated (policy.py: a skipped step): what memory
    keeps of it, so a later update knows the step happened and why it taught nothing."""
    skipped = StepSkipped(reason=reason, rollouts=n_rollouts, judged=stats.n_scored, analyzed=len(analyzed))
    scope = f"Step {step}" + (f" (instance {instance_id})" if instance_id is not None else "")
    text = (f"{scope} was not evaluated: {skipped.judged} of {skipped.rollouts} rollouts were judged and {skipped.analyzed} "
            f"analyzed ({reason}). Its rewards are the failure policy's for the rollouts not judged, and the "
            "rubric was carried forward unchanged." if n_rollouts else
            f"{scope} was not evaluated: it has no rollouts ({reason}); amaris gave no reward for it, and the rubric "
            "was carried forward unchanged.")
    answer = SummaryAnswer(executive_summary=text, reward_hacking="not evaluated", rubric_meta_evaluation="not evaluated",
                           performance_advancement="not evaluated", memory_entry=text)
    return SummaryRecord(step=step, instance_id=instance_id, n_rollouts=n_rollouts, n_analyzed=len(analyzed), chunks=0,
                         stats=stats, hacking=count_hacking(analyzed), summary=answer, skipped=skipped)


async def summarize_step(session: Session, step: int, memory: MemoryStore | None, force: bool = False,
                         not_evaluated: NotEvaluated | None = None) -> StageOutcome:
    """`not_evaluated`: why the step, or some of its instances, is summarized as skipped whatever its analyses
    (policy.py, `carry`)."""
    run = session.run
    skip = not_evaluated or NotEvaluated()
    rollouts = artifacts.load_rollouts(run, step)
    seen = Upstream(run, step)  # checked once for every instance
    have_analyses = analyses_sha(run, step, skipped=skip.step is not None, seen=seen) is not None
    scores = {s.rollout_id: s for s in artifacts.load_scores(run, step)}
    analyses = {a.rollout_id: a for a in artifacts.load_analyses(run, step)} if have_analyses else {}
    groups = _groups(session, rollouts)
    outcome = StageOutcome(stage="summarize", step=step, total=len(groups))

    async def one(item: tuple[str | None, list[Rollout]]) -> bool:
        return await _summarize_group(session, step, item[0], item[1], scores, analyses, force, skip.of(item[0]), seen)

    computed = await bounded_map(list(groups.items()), one, session.settings.agent("summarizer").concurrency)
    artifacts.flush(run, step)  # a stage's records reach the disk as it ends (artifacts.held)
    outcome.done = sum(computed)
    outcome.reused = len(groups) - outcome.done
    if memory is not None:
        await in_thread(memory, lambda: index_step(memory, RunCatalog(run), step, ("analysis", "summary")))
    summary = artifacts.load_summary(run, step) if None in groups else None
    outcome.mean_reward = summary.stats.mean_reward if summary else None
    return outcome.stop()
