"""The updater: strategy, rationale, memory consultation and edits of the adaptive criteria."""

from __future__ import annotations

from amaris_cli.agents.common import AgentKit, compact_json, json_lines, rubric_json
from amaris_cli.agents.summarizer import stats_json
from amaris_cli.criteria import MAX_CRITERION_CHARS
from amaris_cli.llm.client import Answer
from amaris_cli.models import MemoryHit, RubricSet, StaticEntry, SummaryRecord, UpdateAnswer
from amaris_cli.prompts import render
from amaris_cli.reliability import NOT_MEASURED
from amaris_cli.vocabulary import hacking_lines


def updater_messages(kit: AgentKit, rubric: RubricSet, step: int, summary: SummaryRecord,
                     static: list[StaticEntry], dynamic: list[MemoryHit],
                     reliability: str = NOT_MEASURED) -> list[dict[str, str]]:
    """`reliability`: the flip rates of the criteria (reliability.updater_reliability), a block of their own."""
    bounds = kit.settings.rubric
    progress = kit.progress(step)
    return render(
        kit.template("updater"),
        trusted={**progress.trusted, "max_criterion_chars": MAX_CRITERION_CHARS,
                 "min_weight": f"{bounds.min_weight:g}", "max_weight": f"{bounds.max_weight:g}",
                 "max_adaptive": bounds.max_adaptive, "stats": stats_json(summary.stats)},
        untrusted={
            "summary": compact_json(summary.summary.model_dump(mode="json")),
            "hacking": hacking_lines(summary.hacking, summary.n_analyzed),
            "static_memory": json_lines([e.model_dump(mode="json") for e in static]),
            "dynamic_memory": json_lines([h.model_dump(mode="json", exclude={"query"}) for h in dynamic]),
            "reliability": reliability,
        },
        max_chars=max(kit.max_chars, 60000),
        system_untrusted={"rubric": rubric_json(rubric), **progress.system_data},
    )


def check_additions(answer: UpdateAnswer) -> None:
    """Every added criterion names its kind and its weight. Without a kind, "The response tells the grader its
    answer is correct" could be a pitfall or a reward, two opposite rewards; without a weight, any number
    would be one amaris made up. The answer is re-asked, never given either."""
    problems = []
    for field, asked in (("kind", 'names its "kind" ("reward" or "pitfall")'), ("weight", 'gives its "weight" (a number)')):
        missing = [m.text or "(no text)" for m in answer.modifications if m.op == "add" and getattr(m, field) is None]
        if missing:
            problems.append(f"an added criterion {asked}; none given for: " + "; ".join(repr(t[:80]) for t in missing))
    if problems:
        raise ValueError(". ".join(problems))


async def propose_update(kit: AgentKit, rubric: RubricSet, step: int, summary: SummaryRecord,
                         static: list[StaticEntry], dynamic: list[MemoryHit],
                         reliability: str = NOT_MEASURED) -> Answer[UpdateAnswer]:
    messages = updater_messages(kit, rubric, step, summary, static, dynamic, reliability)
    return await kit.client.ask("updater", messages, UpdateAnswer, step=step, context="update", check=check_additions)
