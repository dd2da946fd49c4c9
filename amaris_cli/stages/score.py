"""Stage 1: judge every rollout of a step against its rubric, one verdict per criterion.

Rewards are computed by amaris from the verdicts (see rubrics.compute_reward), never taken from
the judge. A rollout that cannot be judged is written as `failed` with its error.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import fmean

from amaris_cli.agents.group_scorer import score_group
from amaris_cli.agents.scorer import score_rollout
from amaris_cli.errors import AmarisError
from amaris_cli.models import Rollout, RubricSet, ScoreRecord
from amaris_cli.rollouts import group_by_instance, instance_key
from amaris_cli.rundir import RunDir
from amaris_cli.session import Session
from amaris_cli.stages.common import StageOutcome, bounded_map
from amaris_cli.stages.journal import StageJournal


def group_rollouts(rollouts: list[Rollout], size: int) -> list[list[Rollout]]:
    """Rollouts sharing a prompt (instance), in input order, at most `size` per group call."""
    return [members[i : i + size] for members in group_by_instance(rollouts).values()
            for i in range(0, len(members), size)]


def rubric_for(run: RunDir, step: int, lag: int = 0, instance_id: str | None = None,
               version: int | None = None) -> RubricSet:
    """The rubric that scores `step`: an explicit version, else the newest version <= step - lag
    (per instance when the instance has its own rubric history)."""
    if instance_id is not None:
        v = version if version is not None else run.rubric_version_for(step, lag, instance_id)
        if v is not None and run.rubric_path(v, instance_id).exists():
            return run.load_rubric(v, instance_id)
    v = version if version is not None else run.rubric_version_for(step, lag)
    if v is None:
        raise AmarisError(f"{run.path}: no rubric version usable for step {step} (lag {lag}); was the run initialized?")
    rubric = run.load_rubric(v)
    if instance_id is not None:
        rubric = rubric.model_copy(update={"instance_id": instance_id})
    return rubric


async def score_step(
    session: Session,
    step: int,
    rollouts: list[Rollout],
    *,
    lag: int = 0,
    rubric_version: int | None = None,
    output: str = "scores",
    neutral_reward: float | None = None,
    on_done: Callable[[ScoreRecord], None] | None = None,
) -> tuple[StageOutcome, list[ScoreRecord]]:
    run, settings = session.run, session.settings
    outcome = StageOutcome(stage="score" if output == "scores" else output, step=step, total=len(rollouts))
    per_instance = settings.pipeline.per_instance
    rubrics: dict[str | None, RubricSet] = {}

    def rubric_of(rollout: Rollout) -> RubricSet:
        key = instance_key(rollout) if per_instance else None
        if key not in rubrics:
            rubrics[key] = rubric_for(run, step, lag, key, rubric_version)
        return rubrics[key]

    for rollout in rollouts:
        rubric_of(rollout)
    journal = StageJournal(run.step_dir(step) / f"{output}.jsonl", ScoreRecord, lambda r: r.rollout_id)
    by_id = {r.id: r for r in rollouts}

    def reusable(record: ScoreRecord) -> bool:
        rollout = by_id.get(record.rollout_id)
        return (record.status == "scored" and rollout is not None
                and record.rubric_version == rubric_of(rollout).version)

    done = journal.done(reusable)
    outcome.reused = len(done)
    todo = [r for r in rollouts if r.id not in done]

    def policy(record: ScoreRecord) -> ScoreRecord:
        if record.status == "failed" and neutral_reward is not None:
            return record.model_copy(update={"reward": neutral_reward})  # policy `neutral`; status stays failed
        return record

    with journal.open() as sink:
        def finished(records: list[ScoreRecord]) -> None:
            for record in records:
                sink.append(record.model_dump(mode="json"))
                if on_done:
                    on_done(record)

        async def one(rollout: Rollout) -> list[ScoreRecord]:
            return [policy(await score_rollout(session.kit, rubric_of(rollout), rollout, step))]

        async def group(members: list[Rollout]) -> list[ScoreRecord]:
            key = instance_key(members[0])
            return [policy(r) for r in await score_group(session.kit, rubric_of(members[0]), members, step, key)]

        limit = settings.agent("scorer").concurrency
        if settings.pipeline.group_by == "input":
            results = await bounded_map(group_rollouts(todo, settings.pipeline.group_size), group, limit, finished)
        else:
            results = await bounded_map(todo, one, limit, finished)
        for records in results:
            for record in records:
                done[record.rollout_id] = record
    records = [done[r.id] for r in rollouts]
    journal.finish(records)

    outcome.done = sum(r.status == "scored" for r in records)
    outcome.failed = sum(r.status == "failed" for r in records)
    outcome.errors = [f"{r.rollout_id}: {r.error}" for r in records if r.status == "failed"]
    rewards = [r.reward for r in records if r.status == "scored" and r.reward is not None]
    outcome.mean_reward = round(fmean(rewards), 6) if rewards else None
    session.manifest.mark(step, "score" if output == "scores" else output)
    session.save_manifest()
    return outcome.stop(), records
