"""Group (relative) scoring, as RULER does: the rollouts that share a prompt are judged in one
call, with the prompt, the rubric and the reference sent once. Identical outputs are judged once
and their verdicts copied. The answer is checked against the request: one entry per response,
one verdict per criterion in each. The call asks for a completion budget that fits its answer, and
a group too large for the scorer's budget cap is split into calls that fit."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from amaris_cli.agents.common import AgentKit, rubric_for_judge
from amaris_cli.agents.scalecheck import scale_problem
from amaris_cli.agents.scorer import (
    JudgeVerdict,
    ScorerAnswer,
    answer_budget,
    asks_presence,
    check_against,
    responses_that_fit,
    second_value,
)
from amaris_cli.models import Rollout, RubricSet, ScoreRecord, Verdict
from amaris_cli.prompts import render
from amaris_cli.rubrics import compute_reward

_RESPONSE_WORDS = frozenset({"response", "responses"})


class GroupEntry(BaseModel):
    """One response's verdicts. As in a single answer, a second value beside the contract's keys ("final_score",
    "response_id" beside "response") makes it ambiguous, hence invalid; other extra keys are ignored."""

    model_config = ConfigDict(extra="ignore")
    response: int
    verdicts: list[JudgeVerdict]

    @model_validator(mode="before")
    @classmethod
    def _no_second_value(cls, data: Any) -> Any:
        if isinstance(data, dict) and (other := second_value(data, {"response", "verdicts"}, _RESPONSE_WORDS)):
            raise ValueError(f"response {str(data.get('response'))[:20]}: the entry also gives {other}; which is meant "
                             "is ambiguous: give only \"response\" and \"verdicts\"")
        return data

    @field_validator("response", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):  # true is no response number, whatever pydantic would make of it
            raise ValueError(f"\"response\" must be the response's number, got {value!r}")
        return value


class GroupAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    responses: list[GroupEntry]

    @model_validator(mode="before")
    @classmethod
    def _no_second_responses(cls, data: Any) -> Any:
        if isinstance(data, dict) and (other := second_value(data, {"responses"}, _RESPONSE_WORDS)):
            raise ValueError(f"the answer gives {other} beside \"responses\"; which is meant is ambiguous: give only "
                             "\"responses\"")
        return data


def split_to_fit(unique: list[str], criteria: int, cap: int) -> list[list[str]]:
    """The distinct outputs in as few near-equal parts as fit one call's completion budget each."""
    fit = responses_that_fit(criteria, cap)
    parts = -(-len(unique) // fit)
    size = -(-len(unique) // parts)
    return [unique[i : i + size] for i in range(0, len(unique), size)]


def group_messages(kit: AgentKit, rubric: RubricSet, first: Rollout, outputs: list[str]) -> list[dict[str, str]]:
    """One group call's request; like the scorer's, its system message does not depend on the step."""
    return render(
        kit.template("group_scorer"),
        trusted={"training": kit.training(), "count": len(outputs)},
        untrusted={"prompt": first.input, "reference": first.supplemental_context or ""},
        block_lists={"responses": ("RESPONSE", outputs)},
        max_chars=kit.max_chars,
        system_untrusted={"rubric": rubric_for_judge(rubric)},
    )


async def _judge_part(kit: AgentKit, rubric: RubricSet, first: Rollout, outputs: list[str], step: int,
                      context: str) -> tuple[dict[str, list[Verdict]], str | None]:
    """Verdicts per output for one call, or the error that left them without any."""
    messages = group_messages(kit, rubric, first, outputs)
    one_rollout = check_against(rubric, asks_presence(messages[0]["content"]))

    def check(answer: GroupAnswer) -> None:
        numbers = [e.response for e in answer.responses]
        expected = list(range(1, len(outputs) + 1))
        if sorted(numbers) != expected:
            raise ValueError(f"expected one entry for each response 1..{len(outputs)}, got {numbers}")
        for entry in answer.responses:
            try:
                one_rollout(ScorerAnswer(verdicts=entry.verdicts))
            except ValueError as exc:
                raise ValueError(f"response {entry.response}: {exc}") from None

    answer = await kit.client.ask("scorer", messages, GroupAnswer, step=step, context=context, check=check,
                                  max_tokens=answer_budget(len(rubric.criteria), len(outputs)))
    if answer.value is None:
        return {}, answer.error
    if unreadable := await scale_problem(kit, (v for e in answer.value.responses for v in e.verdicts), "group_scorer"):
        return {}, unreadable
    order = {c.id: i for i, c in enumerate(rubric.criteria)}
    return {outputs[entry.response - 1]: sorted(
        (Verdict(criterion_id=v.criterion_id, score=round(v.value, 6), reason=v.reason) for v in entry.verdicts),
        key=lambda v: order[v.criterion_id]) for entry in answer.value.responses}, None


async def score_group(kit: AgentKit, rubric: RubricSet, members: list[Rollout], step: int, group_key: str) -> list[ScoreRecord]:
    """Score rollouts sharing one prompt; returns one record per member, in order.

    The completion budget grows with responses x criteria (`answer_budget`); a group whose
    verdicts would not fit in the scorer's `max_tokens_cap` is judged in several calls."""
    unique: list[str] = []
    for r in members:
        if r.output not in unique:
            unique.append(r.output)
    parts = split_to_fit(unique, len(rubric.criteria), kit.settings.agent("scorer").token_cap)
    contexts = [f"group:{group_key}"] if len(parts) == 1 else [
        f"group:{group_key}:{i}/{len(parts)}" for i in range(1, len(parts) + 1)]
    results = await asyncio.gather(*(_judge_part(kit, rubric, members[0], part, step, context)
                                     for part, context in zip(parts, contexts, strict=True)))
    by_output: dict[str, list[Verdict]] = {}
    errors: dict[str, str] = {}
    for part, (verdicts, error) in zip(parts, results, strict=True):
        by_output.update(verdicts)
        errors.update({output: error or "no verdict" for output in part if output not in verdicts})
    base = {"step": step, "rubric_version": rubric.version, "instance_id": rubric.instance_id}
    return [ScoreRecord(rollout_id=r.id, **base, status="scored", reward=compute_reward(rubric, by_output[r.output]),
                        verdicts=by_output[r.output]) if r.output in by_output else
            ScoreRecord(rollout_id=r.id, **base, status="failed", error=errors[r.output]) for r in members]
