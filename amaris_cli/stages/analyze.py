"""Stage 2: a structured analysis of every rollout of a step.

Reused when its inputs (the rollouts, the scores, the rubric files that scored them, the analyzer's
prompt and settings) are unchanged; then only failed analyses are asked again."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from amaris_cli import artifacts
from amaris_cli.agents.analyzer import analyze_rollout
from amaris_cli.models import AnalysisRecord, Rollout, RubricSet
from amaris_cli.rollouts import instance_key
from amaris_cli.session import Session
from amaris_cli.stages.common import (
    StageOutcome,
    agent_inputs,
    bounded_map,
    require_sha,
    rubric_inputs,
    training_inputs,
)
from amaris_cli.stages.score import rubric_for
from amaris_cli.vocabulary import vocabulary_text


def analyze_inputs(session: Session, step: int, rubrics: list[RubricSet]) -> dict[str, Any]:
    run = session.run
    return {
        "rollouts": require_sha(run, step, artifacts.ROLLOUTS, "run `amaris score` first"),
        "scores": require_sha(run, step, artifacts.SCORES, "run `amaris score` first"),
        "rubrics": rubric_inputs(run, rubrics),
        "agents": agent_inputs(session, "analyzer"),
        "vocabulary": artifacts.digest(vocabulary_text()),
        **training_inputs(session, step=step),
    }


async def analyze_step(session: Session, step: int, force: bool = False,
                       on_done: Callable[[AnalysisRecord], None] | None = None,
                       skipped_instances: Collection[str] = ()) -> StageOutcome:
    """`skipped_instances`: instances of a per-instance step whose rollouts are not analyzed (policy.py, `carry`:
    their failed scores make the evolution learn nothing from them, as from a whole step of a run that is not
    per-instance); the file then holds the other instances' analyses."""
    run = session.run
    rollouts = artifacts.load_rollouts(run, step)
    if skipped_instances:
        rollouts = [r for r in rollouts if instance_key(r) not in skipped_instances]
    scores = {s.rollout_id: s for s in artifacts.load_scores(run, step)}
    rubrics: dict[tuple[int, str | None], RubricSet] = {}
    for score in scores.values():  # one read per rubric version, not per rollout
        key = (score.rubric_version, score.instance_id)
        if key not in rubrics:
            rubrics[key] = rubric_for(run, score.rubric_version, score.instance_id, exact=True)
    inputs = analyze_inputs(session, step, list(rubrics.values()))
    if skipped_instances:
        inputs["not_evaluated"] = sorted(skipped_instances)
    outcome = StageOutcome(stage="analyze", step=step, total=len(rollouts))
    done: dict[str, AnalysisRecord] = {}
    fresh = artifacts.freshness(run, step, artifacts.ANALYSES).made_from(inputs)
    if fresh and not force:
        done = {a.rollout_id: a for a in artifacts.load_analyses(run, step) if a.status == "analyzed"}
    outcome.reused = len(done)
    todo = [r for r in rollouts if r.id not in done]

    async def one(rollout: Rollout) -> AnalysisRecord:
        score = scores[rollout.id]
        return await analyze_rollout(session.kit, rubrics[score.rubric_version, score.instance_id], rollout, score, step)

    def finished(record: AnalysisRecord) -> None:
        done[record.rollout_id] = record
        if on_done:
            on_done(record)

    await bounded_map(todo, one, session.settings.agent("analyzer").concurrency, finished)
    records = [done[r.id] for r in rollouts]
    if todo or not fresh:
        artifacts.write_jsonl_recorded(run, step, artifacts.ANALYSES, (r.model_dump(mode="json") for r in records),
                                       inputs, session.how)
    artifacts.flush(run, step)  # a stage's records reach the disk as it ends (artifacts.held)
    outcome.done = sum(r.status == "analyzed" for r in records)
    outcome.failed = len(records) - outcome.done
    outcome.errors = [f"{r.rollout_id}: {r.error}" for r in records if r.status == "failed"]
    return outcome.stop()
