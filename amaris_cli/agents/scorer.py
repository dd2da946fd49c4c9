"""The scorer: one call per rollout, one verdict per criterion, reward computed by amaris.

A verdict is the reason, then `score` for a reward criterion or `present` for a pitfall. Values
follow the answer contract (llm/parsing.py): a number from 0 to 1 (or true/false, a word such as
"met", an explicit "7/10" or "85%"); one score off that scale makes the whole answer invalid
(re-asked, then `failed`), since it shows the judge used another scale for all of them.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from amaris_cli.agents.common import AgentKit, rubric_for_judge
from amaris_cli.agents.scalecheck import scale_problem
from amaris_cli.llm.parsing import normalize_presence, normalize_score
from amaris_cli.llm.schemas import scorer_contract
from amaris_cli.models import Rollout, RubricSet, ScoreRecord, Verdict
from amaris_cli.prompts import render
from amaris_cli.rubrics import compute_reward
from amaris_cli.terminal import one_line

# Completion tokens an answer needs, estimated generously: a verdict is
# {"criterion_id": "...", "score": 0.5, "reason": "<one line>"}; a group entry adds its number.
TOKENS_PER_VERDICT = 56
TOKENS_PER_RESPONSE = 12
TOKENS_OVERHEAD = 24


def answer_budget(criteria: int, responses: int = 1) -> int:
    """Completion tokens for `responses` x `criteria` verdicts with one-line reasons."""
    return TOKENS_OVERHEAD + responses * (TOKENS_PER_RESPONSE + criteria * TOKENS_PER_VERDICT)


def responses_that_fit(criteria: int, budget: int) -> int:
    """The most responses whose verdicts fit in `budget` completion tokens (at least one)."""
    return max(1, (budget - TOKENS_OVERHEAD) // (TOKENS_PER_RESPONSE + criteria * TOKENS_PER_VERDICT))


class JudgeVerdict(BaseModel):
    """One verdict as a judge writes it: the reason first, then `score` (reward criteria, 0 to 1) or
    `present` (pitfall criteria: true when the behaviour is shown). The key carries the polarity, so
    a judge never has to guess whether 1 is good or bad; `value` is what amaris records (1 = met, or
    present). A verdict that gives both keys with different values is invalid: it is exactly the
    confusion of polarity the keys exist to rule out."""

    model_config = ConfigDict(extra="ignore")
    criterion_id: str
    reason: str = ""
    score: float | None = None
    present: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_second_value(cls, data: Any) -> Any:
        if isinstance(data, dict) and (other := second_value(data, {"criterion_id", "reason", "score", "present"})):
            raise ValueError(f"criterion {str(data.get('criterion_id'))[:80]!r}: the verdict also gives {other}; which "
                             "value is meant is ambiguous: give only \"criterion_id\", \"reason\" and \"score\" or "
                             "\"present\"")
        return data

    @field_validator("score", mode="before")
    @classmethod
    def _normalize(cls, value: Any) -> float | None:
        return None if value is None else normalize_score(value)

    @field_validator("present", mode="before")
    @classmethod
    def _normalize_presence(cls, value: Any) -> float | None:
        return None if value is None else normalize_presence(value)

    @field_validator("reason", mode="before")
    @classmethod
    def _one_line(cls, value: Any) -> str:
        return one_line(str(value or ""), 500)

    @model_validator(mode="after")
    def _one_value(self) -> JudgeVerdict:
        if self.score is None and self.present is None:
            raise ValueError(f"criterion {self.criterion_id!r}: no verdict; give \"score\" (a reward criterion, "
                             "0 to 1) or \"present\" (a pitfall criterion, true or false)")
        if self.score is not None and self.present is not None and self.score != self.present:
            raise ValueError(f"criterion {self.criterion_id!r}: \"score\" {self.score:g} and \"present\" "
                             f"{self.present:g} disagree; give \"score\" for a reward criterion and \"present\" "
                             "for a pitfall, not both")
        return self

    @property
    def value(self) -> float:
        return self.present if self.present is not None else self.score  # type: ignore[return-value]


class ScorerAnswer(BaseModel):
    """The scorer's answer, exactly in the shape its prompt asks for (the keys are the contract: no other
    names are read as these, so a judge that answers in another shape is re-asked with the reason)."""

    model_config = ConfigDict(extra="ignore")
    verdicts: list[JudgeVerdict]

    @model_validator(mode="before")
    @classmethod
    def _no_second_verdicts(cls, data: Any) -> Any:
        if isinstance(data, dict) and (other := second_value(data, {"verdicts"})):
            raise ValueError(f"the answer gives {other} beside \"verdicts\"; which is meant is ambiguous: give only "
                             "\"verdicts\"")
        return data


# Words of a key that carries a verdict: beside the contract's keys, a second value the judge may have meant
# ("met": false beside "score": 1, "final_score", "revised_verdicts"). Other extra keys ("confidence") are ignored.
_VERDICT_WORDS = {"score", "scores", "scored", "met", "present", "verdict", "verdicts", "grade", "grades", "graded",
                  "rating", "ratings", "pass", "passed", "passes", "fail", "failed", "points", "mark", "marks", "value",
                  "result", "results", "judgement", "judgment", "satisfied", "meets", "reward", "rewards", "overall",
                  "correct", "incorrect", "correctness", "ok", "conclusion", "evaluation", "evaluations", "decision",
                  "outcome", "outcomes"}


def second_value(data: dict[Any, Any], contract: set[str], also: frozenset[str] = frozenset()) -> str | None:
    """The first key beside `contract` that names a verdict, or one of the words `also` (a group answer's second
    "responses"), as `"key": value`, cut; or None."""
    words_of_a_verdict = _VERDICT_WORDS | also
    for key, value in data.items():
        if key in contract:
            continue
        # Accents off ("évaluation"); a key in another script ("ѕcore" with a Cyrillic letter, "评分") cannot be
        # read as no verdict, so it is one.
        folded = "".join(c for c in unicodedata.normalize("NFKD", str(key)) if not unicodedata.combining(c))
        words = re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", folded).lower())
        if not folded.isascii() or words_of_a_verdict.intersection(words):
            return f"{str(key)[:40]!r}: {one_line(repr(value), 40)}"
    return None


def asks_presence(system: str) -> bool:
    """Whether a scorer template asks for `present` on pitfalls (the packaged ones do). A run's own
    older template that asks for scores keeps that reading: a pitfall's score, 1 = present."""
    return '"present"' in system


def check_against(rubric: RubricSet, presence: bool = True):  # noqa: ANN201 - returns a checker
    """The answer holds exactly one verdict per criterion; with `presence`, each under the key of its
    kind: `score` for a reward criterion, `present` for a pitfall (a pitfall's bare score could
    mean "1 = good" as easily as "1 = present", so it is invalid, never guessed)."""
    expected = [c.id for c in rubric.criteria]
    kinds = {c.id: c.kind for c in rubric.criteria}

    def check(answer: ScorerAnswer) -> None:
        got = [v.criterion_id for v in answer.verdicts]
        missing = [i for i in expected if i not in got]
        unknown = sorted({i for i in got if i not in expected})
        dupes = sorted({i for i in got if got.count(i) > 1})
        problems = []
        # Quoted: an id given with a trailing space or a look-alike letter reads the same as the one it misses.
        if missing:
            problems.append(f"no verdict for {', '.join(map(ascii, missing))}")
        if unknown:
            problems.append(f"unknown criterion ids {', '.join(map(ascii, unknown))}")
        if dupes:
            problems.append(f"several verdicts for {', '.join(map(ascii, dupes))}")
        if problems:
            raise ValueError("; ".join(problems) + f" (expected exactly one verdict for each of: {', '.join(expected)})")
        if presence:
            pitfalls = [v.criterion_id for v in answer.verdicts if kinds[v.criterion_id] == "pitfall" and v.present is None]
            rewards = [v.criterion_id for v in answer.verdicts if kinds[v.criterion_id] == "reward" and v.score is None]
            if pitfalls:
                problems.append(f"{', '.join(pitfalls)}: a pitfall criterion is answered with \"present\": true when "
                                "the response shows the behaviour, false when it does not (not with a score)")
            if rewards:
                problems.append(f"{', '.join(rewards)}: a reward criterion is answered with \"score\", a number "
                                "from 0 to 1")
            if problems:
                raise ValueError("; ".join(problems))

    return check


def scorer_messages(kit: AgentKit, rubric: RubricSet, rollout: Rollout, step: int) -> list[dict[str, str]]:
    """The scorer's request. `step` is not part of it: the system message (instructions, training
    context, rubric) is the same at every step and for every rubric version with the same criteria,
    so a verdict cannot depend on a step label and the prefix is cached across the run."""
    del step
    return render(
        kit.template("scorer"),
        trusted={"training": kit.training()},
        untrusted={
            "prompt": rollout.input,
            "reference": rollout.supplemental_context or "",
            "response": rollout.output,
        },
        max_chars=kit.max_chars,
        system_untrusted={"rubric": rubric_for_judge(rubric)},
    )


async def score_rollout(kit: AgentKit, rubric: RubricSet, rollout: Rollout, step: int,
                        context_prefix: str = "") -> ScoreRecord:
    """`context_prefix` marks the call in calls.jsonl (serve's validation: VALIDATION_CONTEXT); the request is the
    same either way."""
    messages = scorer_messages(kit, rubric, rollout, step)
    answer = await kit.client.ask(
        "scorer", messages, ScorerAnswer, step=step, context=context_prefix + rollout.id,
        check=check_against(rubric, asks_presence(messages[0]["content"])),
        max_tokens=answer_budget(len(rubric.criteria)), contract=scorer_contract(rubric),
    )
    base = {"rollout_id": rollout.id, "step": step, "rubric_version": rubric.version, "instance_id": rubric.instance_id}
    if answer.value is None:
        return ScoreRecord(**base, status="failed", error=answer.error)
    if unreadable := await scale_problem(kit, answer.value.verdicts):
        return ScoreRecord(**base, status="failed", error=unreadable)
    order = {c.id: i for i, c in enumerate(rubric.criteria)}
    verdicts = sorted(
        (Verdict(criterion_id=v.criterion_id, score=round(v.value, 6), reason=v.reason) for v in answer.value.verdicts),
        key=lambda v: order[v.criterion_id],
    )
    return ScoreRecord(**base, status="scored", reward=compute_reward(rubric, verdicts), verdicts=verdicts)
