"""The query generator: targeted memory queries from the current step's summary."""

from __future__ import annotations

from amaris_cli.agents.common import AgentKit, compact_json
from amaris_cli.agents.summarizer import stats_json
from amaris_cli.llm.client import Answer
from amaris_cli.models import QueriesAnswer, SummaryRecord
from amaris_cli.prompts import render
from amaris_cli.vocabulary import hacking_lines

ADAPTIVE_QUERY_CAP = 8


def query_budget(max_queries: int | None) -> str:
    if max_queries is None:
        return f"between 1 and {ADAPTIVE_QUERY_CAP} queries, as many as the evidence needs"
    return f"at most {max_queries} queries"


async def generate_queries(kit: AgentKit, step: int, summary: SummaryRecord, max_queries: int | None) -> Answer[QueriesAnswer]:
    cap = max_queries or ADAPTIVE_QUERY_CAP
    progress = kit.progress(step)
    messages = render(
        kit.template("query_generator"),
        trusted={**progress.trusted, "query_budget": query_budget(max_queries),
                 "stats": stats_json(summary.stats)},
        untrusted={"summary": compact_json(summary.summary.model_dump(mode="json")),
                   "hacking": hacking_lines(summary.hacking, summary.n_analyzed)},
        max_chars=max(kit.max_chars, 20000),
        system_untrusted=progress.system_data,
    )

    def check(answer: QueriesAnswer) -> None:
        if not any(q.strip() for q in answer.queries):
            raise ValueError("no queries given")

    answer = await kit.client.ask("query_generator", messages, QueriesAnswer, step=step, context="queries", check=check)
    if answer.value is not None:
        seen: list[str] = []
        for q in answer.value.queries:
            q = " ".join(q.split())
            if q and q not in seen:
                seen.append(q)
        answer.value = QueriesAnswer(queries=seen[:cap])  # a longer list is trimmed, not an error
    return answer
