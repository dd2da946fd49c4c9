"""Group (relative) scoring, as RULER does: the rollouts that share a prompt are judged in one
call, with the prompt, the rubric and the reference sent once. Identical outputs are judged once
and their verdicts copied. The answer is checked against the request: one entry per response,
one verdict per criterion in each."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from amaris_cli.agents.common import AgentKit, rubric_for_judge
from amaris_cli.agents.scorer import JudgeVerdict, ScorerAnswer, check_against
from amaris_cli.models import Rollout, RubricSet, ScoreRecord, Verdict
from amaris_cli.prompts import render
from amaris_cli.rubrics import compute_reward


class GroupEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")
    response: int
    verdicts: list[JudgeVerdict]

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if isinstance(data, dict) and "response" not in data:
            for alias in ("index", "id", "response_id"):
                if alias in data:
                    return {**data, "response": data[alias]}
        return data


class GroupAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    responses: list[GroupEntry]


async def score_group(kit: AgentKit, rubric: RubricSet, members: list[Rollout], step: int, group_key: str) -> list[ScoreRecord]:
    """Score rollouts sharing one prompt; returns one record per member, in order."""
    unique: list[str] = []
    for r in members:
        if r.output not in unique:
            unique.append(r.output)
    first = members[0]
    messages = render(
        kit.template("group_scorer"),
        trusted={"training": kit.training(step), "rubric": rubric_for_judge(rubric), "count": len(unique)},
        untrusted={"prompt": first.input, "reference": first.supplemental_context or ""},
        block_lists={"responses": ("RESPONSE", unique)},
        max_chars=kit.max_chars,
    )
    one_rollout = check_against(rubric)

    def check(answer: GroupAnswer) -> None:
        numbers = [e.response for e in answer.responses]
        expected = list(range(1, len(unique) + 1))
        if sorted(numbers) != expected:
            raise ValueError(f"expected one entry for each response 1..{len(unique)}, got {numbers}")
        for entry in answer.responses:
            try:
                one_rollout(ScorerAnswer(verdicts=entry.verdicts))
            except ValueError as exc:
                raise ValueError(f"response {entry.response}: {exc}") from None

    answer = await kit.client.ask("scorer", messages, GroupAnswer, step=step, context=f"group:{group_key}", check=check)
    base = {"step": step, "rubric_version": rubric.version, "instance_id": rubric.instance_id}
    if answer.value is None:
        return [ScoreRecord(rollout_id=r.id, **base, status="failed", error=answer.error) for r in members]
    order = {c.id: i for i, c in enumerate(rubric.criteria)}
    by_output: dict[str, list[Verdict]] = {}
    for entry in answer.value.responses:
        by_output[unique[entry.response - 1]] = sorted(
            (Verdict(criterion_id=v.criterion_id, score=round(v.score, 6), reason=v.reason) for v in entry.verdicts),
            key=lambda v: order[v.criterion_id])
    return [ScoreRecord(rollout_id=r.id, **base, status="scored", reward=compute_reward(rubric, by_output[r.output]),
                        verdicts=by_output[r.output]) for r in members]
