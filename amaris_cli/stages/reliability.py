"""The judge reliability check of one step (reliability.py), when `reliability.enabled`: a sample of the
step's scorer calls asked again, written to steps/N/reliability.json.

`evolve` runs it beside the step's analyses (`beside`): it needs only the step's scores, so it adds no
request to `score` (the trainer's critical path) and little to the evolution's wall time. The file is
reused while its inputs are unchanged (the rollouts, the scores, the rubric files, the scorer's prompt and
settings, the group settings the step was scored with, the training context the scorer reads, and the
reliability settings); a file with failed re-judgements is made again (answered requests come from
calls.jsonl, failed ones go to the judge again), as a stage retries its failed records.

The step is re-judged by the judge that scored it: when this evolution's scorer prompt, model or sampling
differ from those its scores record (a `score --model X` followed by an `evolve` without it), nothing is
asked and the file says why: the flip rate would compare two judges.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from amaris_cli import artifacts
from amaris_cli.agents.rejudge import budget, questions, rejudge, sample
from amaris_cli.models import ReliabilityRecord, RubricSet
from amaris_cli.reliability import RELIABILITY, load_reliability
from amaris_cli.session import Session
from amaris_cli.stages.common import agent_inputs, bounded_map, require_sha, rubric_inputs, training_inputs
from amaris_cli.stages.score import rubric_for


@asynccontextmanager
async def beside(session: Session, step: int, force: bool = False) -> AsyncIterator[None]:
    """Check the step while the body runs; the body's error cancels the check, the check's error is raised
    once the body is done."""
    task = asyncio.create_task(check_step(session, step, force=force))
    try:
        yield
    except BaseException:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    await task


def _differences(recorded: Any, now: Any, path: str) -> list[str]:
    """The dotted paths at which two JSON values differ."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        return [d for k in sorted({*recorded, *now}) for d in _differences(recorded.get(k), now.get(k), f"{path}.{k}")]
    return [] if recorded == now else [path]


def _judged_otherwise(recorded: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Why this session cannot re-judge what the scores were judged with, or None."""
    changed = [d for key in now for d in _differences(recorded.get(key), now[key], key)]
    if not changed:
        return None
    return (f"the step was scored with other scorer settings than this evolution's ({', '.join(changed)}); "
            "re-judging would compare two judges (give `evolve` the settings `score` had)")


async def check_step(session: Session, step: int, force: bool = False) -> ReliabilityRecord | None:
    """The step's reliability record (None when the check is off)."""
    run, config = session.run, session.settings.reliability
    if not config.enabled:
        return None
    scored = artifacts.derivation(run, step, artifacts.SCORES)
    recorded = scored.inputs if scored is not None else {}
    group = recorded.get("group") or {}
    agent = "group_scorer" if group.get("group_by") == "input" else "scorer"
    rollouts, scores = artifacts.load_rollouts(run, step), artifacts.load_scores(run, step)
    rubrics: dict[tuple[int, str | None], RubricSet] = {}
    for s in scores:
        if (s.rubric_version, s.instance_id) not in rubrics:
            rubrics[s.rubric_version, s.instance_id] = rubric_for(run, s.rubric_version, s.instance_id, exact=True)
    now = {"agents": agent_inputs(session, agent), **training_inputs(session, stage=False)}
    inputs = {
        "rollouts": require_sha(run, step, artifacts.ROLLOUTS, "run `amaris score` first"),
        "scores": require_sha(run, step, artifacts.SCORES, "run `amaris score` first"),
        "rubrics": rubric_inputs(run, list(rubrics.values())),
        "group": group,
        "reliability": config.model_dump(include={"max_extra", "tolerance", "seed"}),
        **now,
    }
    if not force and artifacts.freshness(run, step, RELIABILITY).made_from(inputs):
        existing = load_reliability(run, step)
        if existing is not None and all(j.status == "judged" for j in existing.judgements):
            return existing
    asked = questions(rollouts, scores, rubrics, group.get("group_size") if agent == "group_scorer" else None,
                      session.settings.agent("scorer").token_cap)
    record = ReliabilityRecord(step=step, tolerance=config.tolerance, max_extra=config.max_extra, seed=config.seed,
                               scorer_calls=len(asked), budget=budget(config.max_extra, len(asked)), calls=0,
                               skipped=_judged_otherwise(recorded, now))
    if record.skipped is None:
        chosen = sample(asked, record.budget, config.seed, step)
        if not chosen:
            record.skipped = (f"a budget of {record.budget} calls ({config.max_extra:g} x {len(asked)} scorer calls, "
                              "rounded down) asks nothing again")
        results = await bounded_map(chosen, lambda pick: rejudge(session.kit, pick[0], pick[1], config.seed, step),
                                    session.settings.agent("scorer").concurrency)
        record.calls = sum(sent for sent, _ in results)
        record.judgements = [j for _, found in results for j in found]
    else:
        session.say(f"warning: step {step}: judge reliability not checked: {record.skipped}")
    artifacts.write_json_recorded(run, step, RELIABILITY, record.model_dump(mode="json"), inputs, session.how)
    return record
