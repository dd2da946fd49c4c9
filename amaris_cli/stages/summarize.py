"""Stage 3: the step summary (per chunk, merged by the meta-summarizer when the step is large),
per-criterion statistics, and indexing the step's analyses and summary in the memory."""

from __future__ import annotations

from amaris_cli.agents.summarizer import merge_chunks, summarize_chunk
from amaris_cli.errors import AmarisError, InputError
from amaris_cli.jsonio import read_json, write_json_atomic
from amaris_cli.memory.service import RunCatalog, index_step
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import AnalysisRecord, HackingCount, Rollout, ScoreRecord, SummaryAnswer, SummaryRecord
from amaris_cli.records import (
    analyses_path,
    chunk_path,
    load_analyses,
    load_scores,
    load_summary,
    stats_path,
    summary_path,
)
from amaris_cli.rollouts import group_by_instance
from amaris_cli.rubrics import step_stats
from amaris_cli.session import Session
from amaris_cli.stages.common import StageOutcome, bounded_map, load_rollouts
from amaris_cli.stages.score import rubric_for
from amaris_cli.vocabulary import HACKING_PATTERNS


def count_hacking(analyses: list[AnalysisRecord]) -> list[HackingCount]:
    """Prevalence of each named pattern: the share of analyzed rollouts showing it."""
    counts: dict[str, int] = {}
    for record in analyses:
        assert record.analysis is not None
        for name in {p.pattern for p in record.analysis.reward_hacking.patterns}:
            counts[name] = counts.get(name, 0) + 1
    total = max(1, len(analyses))
    return [HackingCount(pattern=name, count=n, prevalence=round(n / total, 6), known=name in HACKING_PATTERNS)
            for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _groups(session: Session, rollouts: list[Rollout]) -> dict[str | None, list[Rollout]]:
    if not session.settings.pipeline.per_instance:
        return {None: rollouts}
    return dict(group_by_instance(rollouts))


async def _summarize_group(session: Session, step: int, instance_id: str | None, rollouts: list[Rollout],
                           scores: dict[str, ScoreRecord], analyses: dict[str, AnalysisRecord]) -> SummaryRecord:
    run, kit = session.run, session.kit
    ids = [r.id for r in rollouts]
    group_scores = [scores[i] for i in ids if i in scores]
    if not group_scores:
        raise InputError(run.step_dir(step), f"step {step} has no scores for {instance_id or 'the step'}")
    version = group_scores[0].rubric_version
    rubric = rubric_for(run, step, version=version, instance_id=instance_id)
    groups = {r.id: key for key, members in group_by_instance(rollouts).items() for r in members}
    stats = step_stats(step, rubric, group_scores, groups)
    write_json_atomic(stats_path(run, step, instance_id), stats.model_dump(mode="json"))
    analyzed = [analyses[i] for i in ids if i in analyses and analyses[i].status == "analyzed"]
    if not analyzed:
        raise AmarisError(f"{analyses_path(run, step)}: no analyzed rollouts to summarize at step {step}")
    size = session.settings.pipeline.chunk_size
    chunks = [analyzed[i : i + size] for i in range(0, len(analyzed), size)]
    if len(chunks) == 1:
        answer = await summarize_chunk(kit, rubric, step, chunks[0], stats, "all rollouts")
        if answer.value is None:
            raise AmarisError(f"step {step}: the summarizer failed: {answer.error}")
        summary: SummaryAnswer = answer.value
    else:
        async def chunk_summary(index: int) -> tuple[int, SummaryAnswer]:
            chunk = chunks[index]
            path = chunk_path(run, step, index, instance_id)
            if path.exists():  # resume: a chunk summary already written is kept
                stored = read_json(path)
                if stored.get("n") == len(chunk):
                    return len(chunk), SummaryAnswer.model_validate(stored["summary"])
            answer = await summarize_chunk(kit, rubric, step, chunk, stats, f"chunk {index + 1} of {len(chunks)}")
            if answer.value is None:
                raise AmarisError(f"step {step}: the summarizer failed on chunk {index + 1}: {answer.error}")
            write_json_atomic(path, {"chunk": index, "n": len(chunk), "rollout_ids": [a.rollout_id for a in chunk],
                                     "summary": answer.value.model_dump(mode="json")})
            return len(chunk), answer.value

        parts = await bounded_map(list(range(len(chunks))), chunk_summary, kit.settings.agent("summarizer").concurrency)
        # Merge at most merge_fan_in summaries per call, level by level, so a prompt stays bounded
        # however large the step (10,000 rollouts in chunks of 32: 313 -> 20 -> 2 -> 1).
        fan_in = session.settings.pipeline.merge_fan_in
        while len(parts) > 1:
            groups = [parts[i : i + fan_in] for i in range(0, len(parts), fan_in)]

            async def merge(group: list[tuple[int, SummaryAnswer]]) -> tuple[int, SummaryAnswer]:
                if len(group) == 1:
                    return group[0]
                merged = await merge_chunks(kit, rubric, step, group, stats)
                if merged.value is None:
                    raise AmarisError(f"step {step}: the meta-summarizer failed: {merged.error}")
                return sum(n for n, _ in group), merged.value

            parts = await bounded_map(groups, merge, kit.settings.agent("meta_summarizer").concurrency)
        summary = parts[0][1]
    record = SummaryRecord(step=step, instance_id=instance_id, n_rollouts=len(rollouts), n_analyzed=len(analyzed),
                           chunks=len(chunks), stats=stats, hacking=count_hacking(analyzed), summary=summary)
    write_json_atomic(summary_path(run, step, instance_id), record.model_dump(mode="json"))
    return record


async def summarize_step(session: Session, step: int, memory: MemoryStore | None, force: bool = False) -> StageOutcome:
    run = session.run
    rollouts = load_rollouts(run, step)
    scores = {s.rollout_id: s for s in load_scores(run, step)}
    analyses = {a.rollout_id: a for a in load_analyses(run, step)}
    if not analyses:
        raise InputError(analyses_path(run, step), f"step {step} has no analyses; run `amaris analyze` first")
    groups = _groups(session, rollouts)
    outcome = StageOutcome(stage="summarize", step=step, total=len(groups))
    todo = [(iid, members) for iid, members in groups.items() if force or load_summary(run, step, iid) is None]
    outcome.reused = len(groups) - len(todo)

    async def one(item: tuple[str | None, list[Rollout]]) -> SummaryRecord:
        return await _summarize_group(session, step, item[0], item[1], scores, analyses)

    await bounded_map(todo, one, session.settings.agent("summarizer").concurrency)
    outcome.done = len(todo)
    if memory is not None:
        index_step(memory, RunCatalog(run), step, ("analysis", "summary"))
    summary = load_summary(run, step, None) if None in groups else None
    outcome.mean_reward = summary.stats.mean_reward if summary else None
    session.manifest.mark(step, "summarize")
    session.save_manifest()
    return outcome.stop()
