"""Stage 2: a structured analysis of every rollout of a step."""

from __future__ import annotations

from collections.abc import Callable

from amaris_cli.agents.analyzer import analyze_rollout
from amaris_cli.errors import InputError
from amaris_cli.models import AnalysisRecord, Rollout, RubricSet
from amaris_cli.records import analyses_path, load_scores, scores_path
from amaris_cli.session import Session
from amaris_cli.stages.common import StageOutcome, bounded_map, load_rollouts
from amaris_cli.stages.journal import StageJournal
from amaris_cli.stages.score import rubric_for


async def analyze_step(session: Session, step: int, on_done: Callable[[AnalysisRecord], None] | None = None) -> StageOutcome:
    run = session.run
    rollouts = load_rollouts(run, step)
    scores = {s.rollout_id: s for s in load_scores(run, step)}
    if not scores:
        raise InputError(scores_path(run, step), f"step {step} has no scores; run `amaris score` first")
    outcome = StageOutcome(stage="analyze", step=step, total=len(rollouts))
    journal = StageJournal(analyses_path(run, step), AnalysisRecord, lambda r: r.rollout_id)

    def reusable(record: AnalysisRecord) -> bool:
        score = scores.get(record.rollout_id)
        return record.status == "analyzed" and score is not None and record.reward == (score.reward if score.status == "scored" else None)

    done = journal.done(reusable)
    outcome.reused = len(done)
    todo = [r for r in rollouts if r.id not in done]

    rubrics: dict[tuple[int, str | None], RubricSet] = {}

    async def one(rollout: Rollout) -> AnalysisRecord:
        score = scores[rollout.id]
        key = (score.rubric_version, score.instance_id)
        if key not in rubrics:  # one read per rubric version, not per rollout
            rubrics[key] = rubric_for(run, step, version=score.rubric_version, instance_id=score.instance_id)
        return await analyze_rollout(session.kit, rubrics[key], rollout, score, step)

    with journal.open() as sink:
        def finished(record: AnalysisRecord) -> None:
            sink.append(record.model_dump(mode="json"))
            if on_done:
                on_done(record)

        for record in await bounded_map(todo, one, session.settings.agent("analyzer").concurrency, finished):
            done[record.rollout_id] = record
    records = [done[r.id] for r in rollouts]
    journal.finish(records)
    outcome.done = sum(r.status == "analyzed" for r in records)
    outcome.failed = len(records) - outcome.done
    outcome.errors = [f"{r.rollout_id}: {r.error}" for r in records if r.status == "failed"]
    session.manifest.mark(step, "analyze")
    session.save_manifest()
    return outcome.stop()
