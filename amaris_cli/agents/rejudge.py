"""Asking a step's scorer calls again, for the judge reliability check (reliability.py, stages/reliability.py).

What is asked again. A sampled scorer call is sent once more in one of two forms, alternately:
  - `repeat`: the same request with only the tag of its data blocks drawn again. The system message, the
    instructions, every text and every sampling parameter are the ones the step was scored with; only the
    16 hex digits that mark the blocks differ. An identical request cannot measure anything here: calls.jsonl
    answers it from the record (`source: "cache"`), and a record holding two answers for one request could
    not be replayed. A request that differs in meaningless bytes is a new request (sent to the judge, recorded
    under its own hash) that means the same thing, so a verdict that changes shows a judge whose verdict is
    not determined by the response: its sampling (temperature > 0), a server that is not deterministic at
    temperature 0, or sensitivity to irrelevant input. The judge is measured as it scores: the scorer's own
    model, temperature and prompt, never a temperature of our own (that would measure another judge).
  - `permuted`: the same request with the rubric's criteria listed in another order (seeded; never the
    original order), which shows position bias: a verdict that depends on where the criterion stands.
Both are deterministic (the sample, the tag and the order follow from the seed and the call), so a replay
sends the same requests and answers them from the record, byte for byte.

A re-judgement is asked once (no re-ask): each costs exactly one request, so the extra calls of a step stay
within `reliability.max_extra` of its own scorer calls. An answer that breaks the contract is recorded as
failed, not as a flip; so is one whose scores are all 0 or 1 from a judge that scores on another scale
(agents/scalecheck.py: a 0-10 judge's 1s are "not met", and read on 0-1 they would be flips to "met"). That
check's probe is the run's one call per judge (context `scale check`), not a re-judgement: usually scoring
made it already.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from fractions import Fraction

from amaris_cli.agents.common import AgentKit
from amaris_cli.agents.group_scorer import GroupAnswer, group_messages, split_to_fit
from amaris_cli.agents.scalecheck import scale_problem
from amaris_cli.agents.scorer import (
    ScorerAnswer,
    answer_budget,
    asks_presence,
    check_against,
    scorer_messages,
)
from amaris_cli.models import Rejudgement, RejudgementKind, Reverdict, Rollout, RubricSet, ScoreRecord
from amaris_cli.prompts import BLOCK_PATTERN, tag_candidates
from amaris_cli.rollouts import group_rollouts, instance_key

CONTEXT_PREFIX = "reliability:"  # the context of every re-judgement call in calls.jsonl


@dataclass(frozen=True)
class Question:
    """One scorer call of the step as it was asked: its rubric, the rollout whose prompt and reference it
    holds, the outputs it judged (one, or a group call's distinct outputs) and, per output, the score record
    of the first rollout with that output (its verdicts are the first ones)."""

    context: str  # the scorer call's own context: the rollout id, or group:KEY[:i/n]
    rubric: RubricSet
    first: Rollout
    outputs: list[str]
    records: list[ScoreRecord]
    grouped: bool

    @property
    def scored(self) -> bool:
        return all(r.status == "scored" for r in self.records)


def questions(rollouts: list[Rollout], scores: list[ScoreRecord], rubrics: dict[tuple[int, str | None], RubricSet],
              group_size: int | None, token_cap: int) -> list[Question]:
    """The step's scorer calls, rebuilt from its rollouts and scores as stages/score.py made them: one per
    rollout, or (`group_size`) one per group call, split as agents/group_scorer.py splits a group."""
    by_id = {s.rollout_id: s for s in scores}
    present = [r for r in rollouts if r.id in by_id]

    def rubric_of(rollout: Rollout) -> RubricSet:
        record = by_id[rollout.id]
        return rubrics[record.rubric_version, record.instance_id]

    if group_size is None:
        return [Question(context=r.id, rubric=rubric_of(r), first=r, outputs=[r.output], records=[by_id[r.id]],
                         grouped=False) for r in present]
    out: list[Question] = []
    for chunk in group_rollouts(present, group_size):  # the group calls scoring made (its prompt: the first's)
        key, rubric = instance_key(chunk[0]), rubric_of(chunk[0])
        firsts: dict[str, Rollout] = {}
        for r in chunk:
            firsts.setdefault(r.output, r)
        parts = split_to_fit(list(firsts), len(rubric.criteria), token_cap)
        contexts = [f"group:{key}"] if len(parts) == 1 else [
            f"group:{key}:{i}/{len(parts)}" for i in range(1, len(parts) + 1)]
        out += [Question(context=context, rubric=rubric, first=chunk[0], outputs=part,
                         records=[by_id[firsts[o].id] for o in part], grouped=True)
                for part, context in zip(parts, contexts, strict=True)]
    return out


def budget(max_extra: float, scorer_calls: int) -> int:
    """Re-judgement calls allowed: `max_extra` x the step's scorer calls, rounded down (exactly: 0.15 x 20
    is 3, not 3.0000000000000004 rounded either way)."""
    return int(Fraction(str(max_extra)) * scorer_calls)


def _draw(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big")


def sample(asked: list[Question], calls: int, seed: int, step: int) -> list[tuple[Question, RejudgementKind]]:
    """`calls` of the scored questions, ranked by a seeded hash of their context (the same sample whatever
    the order of the file), alternately repeated and permuted (a rubric of one criterion has no other order)."""
    ranked = sorted((q for q in asked if q.scored), key=lambda q: (_draw(seed, step, q.context), q.context))[:calls]
    return [(q, "permuted" if i % 2 and len(q.rubric.criteria) > 1 else "repeat") for i, q in enumerate(ranked)]


def permuted(rubric: RubricSet, seed: int, context: str) -> RubricSet:
    """The rubric with its criteria in a seeded order other than its own (anchors first no longer holds:
    the judge sees one list)."""
    criteria = list(rubric.criteria)
    order = list(criteria)
    random.Random(_draw(seed, "order", context)).shuffle(order)
    if [c.id for c in order] == [c.id for c in criteria]:
        order = order[1:] + order[:1]
    return rubric.model_copy(update={"anchors": order, "adaptive": []})


def redraw_tag(messages: list[dict[str, str]]) -> list[dict[str, str]] | None:
    """The request with the tag of its user message's blocks replaced by another that occurs nowhere in it
    (so no text in a block can hold it: the trust boundary of prompts.py holds); None when the user message
    has no tagged blocks (a run's own template without them), so no distinct repeat exists."""
    user = messages[1]["content"]
    tags = {m.group(2) for m in BLOCK_PATTERN.finditer(user)}
    if len(tags) != 1:
        return None
    old = tags.pop()
    new = next(t for t in tag_candidates([user, "repeat"]) if t not in user)
    return [messages[0], {**messages[1], "content": user.replace(old, new)}, *messages[2:]]


def _request(kit: AgentKit, question: Question, rubric: RubricSet, step: int) -> list[dict[str, str]]:
    if question.grouped:
        return group_messages(kit, rubric, question.first, question.outputs)
    return scorer_messages(kit, rubric, question.first, step)


def _group_check(rubric: RubricSet, outputs: int, presence: bool):  # noqa: ANN202 - returns a checker
    one = check_against(rubric, presence)

    def check(answer: GroupAnswer) -> None:
        numbers = sorted(e.response for e in answer.responses)
        if numbers != list(range(1, outputs + 1)):
            raise ValueError(f"expected one entry for each response 1..{outputs}, got {numbers}")
        for entry in answer.responses:
            one(ScorerAnswer(verdicts=entry.verdicts))

    return check


async def rejudge(kit: AgentKit, question: Question, kind: RejudgementKind, seed: int,
                  step: int) -> tuple[bool, list[Rejudgement]]:
    """Ask one sampled scorer call again: (whether a request was sent, one Rejudgement per output it judged,
    failed with the reason when the answer is missing or invalid)."""
    rubric = permuted(question.rubric, seed, question.context) if kind == "permuted" else question.rubric
    messages = _request(kit, question, rubric, step)
    call = f"{CONTEXT_PREFIX}{kind}:{question.context}"
    base = {"kind": kind, "call": call, "rubric_version": question.rubric.version,
            "instance_id": question.rubric.instance_id,
            "order": [c.id for c in rubric.criteria] if kind == "permuted" else None}

    def failed(error: str) -> list[Rejudgement]:
        return [Rejudgement(rollout_id=r.rollout_id, **base, status="failed", error=error) for r in question.records]

    if kind == "repeat":
        redrawn = redraw_tag(messages)
        if redrawn is None:
            return False, failed("the scorer template has no tagged data blocks: a repeat would be the same request")
        messages = redrawn
    presence = asks_presence(messages[0]["content"])
    budget_tokens = answer_budget(len(rubric.criteria), len(question.outputs))
    answers: list[dict[str, tuple[float, str]]]
    if question.grouped:
        group = await kit.client.ask("scorer", messages, GroupAnswer, step=step, context=call, reasks=0,
                                     check=_group_check(rubric, len(question.outputs), presence), max_tokens=budget_tokens)
        if group.value is None:
            return True, failed(group.error or "no answer")
        if unreadable := await scale_problem(kit, (v for e in group.value.responses for v in e.verdicts),
                                             "group_scorer"):
            return True, failed(unreadable)
        entries = {e.response: e.verdicts for e in group.value.responses}
        answers = [{v.criterion_id: (v.value, v.reason) for v in entries[i]} for i in range(1, len(question.outputs) + 1)]
    else:
        single = await kit.client.ask("scorer", messages, ScorerAnswer, step=step, context=call, reasks=0,
                                      check=check_against(rubric, presence), max_tokens=budget_tokens)
        if single.value is None:
            return True, failed(single.error or "no answer")
        if unreadable := await scale_problem(kit, single.value.verdicts):
            return True, failed(unreadable)
        answers = [{v.criterion_id: (v.value, v.reason) for v in single.value.verdicts}]
    out = []
    for record, again in zip(question.records, answers, strict=True):
        verdicts = [Reverdict(criterion_id=v.criterion_id, first=v.score, again=round(again[v.criterion_id][0], 6),
                              first_reason=v.reason, reason=again[v.criterion_id][1])
                    for v in record.verdicts if v.criterion_id in again]
        out.append(Rejudgement(rollout_id=record.rollout_id, **base, status="judged", verdicts=verdicts))
    return True, out
