"""Stage 1: judge every rollout of a step against its rubric, one verdict per criterion.

Rewards are computed by amaris from the verdicts (see rubrics.compute_reward), never taken from
the judge. A rollout that cannot be judged is written as `failed` with its error; the failure
policy (policy.py) decides what that means for the command and for the reward.

The file is reused when its inputs (rollouts, the rubric files, the scorer's prompt and settings,
the policy) are unchanged; then only failed records are judged again. Otherwise every rollout is
judged again, and requests that did not change are answered from calls.jsonl.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from amaris_cli import artifacts
from amaris_cli.agents.group_scorer import score_group
from amaris_cli.agents.scorer import score_rollout
from amaris_cli.errors import AmarisError
from amaris_cli.figures import mean_reward
from amaris_cli.models import Rollout, RubricSet, ScoreRecord
from amaris_cli.rollouts import group_rollouts, instance_key
from amaris_cli.rundir import RunDir
from amaris_cli.session import Session
from amaris_cli.stages.common import (
    StageOutcome,
    agent_inputs,
    bounded_map,
    require_sha,
    rubric_inputs,
    training_inputs,
)


def rubric_for(run: RunDir, limit: int, instance_id: str | None = None, exact: bool = False) -> RubricSet:
    """The rubric that scores a step whose versions are limited to <= `limit` (`exact`: exactly
    `limit`): the instance's own newest version when it has one, else the run's."""
    def pick(versions: list[int]) -> int | None:
        usable = [v for v in versions if (v == limit if exact else v <= limit)]
        return usable[-1] if usable else None

    if instance_id is not None:
        v = pick(run.rubric_versions(instance_id))
        if v is not None:
            return run.load_rubric(v, instance_id)
    v = pick(run.rubric_versions())
    if v is None:
        raise AmarisError(f"{run.path}: no rubric version {'=' if exact else '<='} {limit}; was the run initialized?")
    rubric = run.load_rubric(v)
    if instance_id is not None:
        rubric = rubric.model_copy(update={"instance_id": instance_id})
    return rubric


async def score_step(
    session: Session,
    step: int,
    rollouts: list[Rollout],
    *,
    limit: int,
    lag: int | None = None,
    explicit_version: int | None = None,
    output: str = artifacts.SCORES,
    force: bool = False,
    on_done: Callable[[ScoreRecord], None] | None = None,
    known: Mapping[str, ScoreRecord] | None = None,
) -> tuple[StageOutcome, list[ScoreRecord]]:
    """Score `rollouts` with the newest rubric version <= `limit` (exactly `explicit_version` when given).
    `lag` is recorded so a replay picks versions the same way. `known` holds records already judged
    with these rubrics in this process's caller (`amaris serve` judges each rollout as it arrives):
    they are written as they are, failed ones included, so the file says what the caller was told."""
    run, settings, policy = session.run, session.settings, session.policy
    stage = "score" if output == artifacts.SCORES else output.removesuffix(".jsonl").removesuffix("s")
    outcome = StageOutcome(stage=stage, step=step, total=len(rollouts))
    per_instance = settings.pipeline.per_instance
    exact = explicit_version is not None
    rubrics: dict[str | None, RubricSet] = {}
    for rollout in rollouts:
        key = instance_key(rollout) if per_instance else None
        if key not in rubrics:
            rubrics[key] = rubric_for(run, explicit_version if exact else limit, key, exact)  # type: ignore[arg-type]

    def rubric_of(rollout: Rollout) -> RubricSet:
        return rubrics[instance_key(rollout) if per_instance else None]

    grouped = settings.pipeline.group_by == "input"
    inputs: dict[str, Any] = {
        "rollouts": require_sha(run, step, artifacts.ROLLOUTS, "store the rollouts first"),
        "rubrics": rubric_inputs(run, list(rubrics.values())),
        "lag": lag,
        "rubric_version": explicit_version,
        "agents": agent_inputs(session, "group_scorer" if grouped else "scorer"),
        "group": {"group_by": settings.pipeline.group_by, "group_size": settings.pipeline.group_size if grouped else None},
        "policy": policy.as_inputs(),
        **training_inputs(session, stage=False),
    }
    done: dict[str, ScoreRecord] = {}
    recorded = artifacts.freshness(run, step, output)
    fresh = recorded.made_from(inputs)
    if fresh and not force:
        done = {r.rollout_id: r for r in artifacts.load_scores(run, step, output) if r.status == "scored"}
    if known:
        done.update((r.id, known[r.id]) for r in rollouts if r.id in known)
    outcome.reused = len(done)
    todo = [r for r in rollouts if r.id not in done]

    def finished(records: list[ScoreRecord]) -> None:
        for record in records:
            done[record.rollout_id] = record
            if on_done:
                on_done(record)

    async def one(rollout: Rollout) -> list[ScoreRecord]:
        return [policy.score(await score_rollout(session.kit, rubric_of(rollout), rollout, step))]

    async def group(members: list[Rollout]) -> list[ScoreRecord]:
        key = instance_key(members[0])
        return [policy.score(r) for r in await score_group(session.kit, rubric_of(members[0]), members, step, key)]

    limit_in_flight = settings.agent("scorer").concurrency
    if grouped:
        await bounded_map(group_rollouts(todo, settings.pipeline.group_size), group, limit_in_flight, finished)
    else:
        await bounded_map(todo, one, limit_in_flight, finished)
    records = [done[r.id] for r in rollouts]
    if todo or not fresh:
        rows = [r.model_dump(mode="json") for r in records]
        # The step's evolution read the scores being replaced, unless they are the same records (scored again
        # under other settings, e.g. a `loop --lag 1` over a step `score` scored, from the same answers) made
        # with the same rubric files: its recorded decisions then stand, and the run replays as it ran. A rubric
        # edited since (in words that left the verdicts as they were) was read by the analyses, the summary and
        # the update: the evolution is no longer complete.
        if output == artifacts.SCORES and not (recorded.made is not None and recorded.holds(rows)
                                               and recorded.made.inputs.get("rubrics") == inputs["rubrics"]):
            artifacts.clear_evolved(run, step)
        artifacts.write_jsonl_recorded(run, step, output, rows, inputs, session.how)

    outcome.done = sum(r.status == "scored" for r in records)
    outcome.failed = sum(r.status == "failed" for r in records)
    outcome.errors = [f"{r.rollout_id}: {r.error}" for r in records if r.status == "failed"]
    outcome.mean_reward = mean_reward(records)
    outcome.rubric_versions = sorted({r.version for r in rubrics.values()})
    return outcome.stop(), records
