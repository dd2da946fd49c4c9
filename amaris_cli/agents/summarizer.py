"""The summarizer (one chunk of analyses) and the meta-summarizer (merging chunk summaries).

Both are given the numbers amaris computes (mean reward, per-criterion statistics, hacking counts)
and asked only for what needs reading: patterns, judgements, a plan and a memory entry."""

from __future__ import annotations

from typing import Any

from amaris_cli.agents.common import AgentKit, compact_json, json_lines, rubric_json
from amaris_cli.display import fmt
from amaris_cli.llm.client import Answer
from amaris_cli.models import AnalysisRecord, HackingCount, RubricSet, StepStats, SummaryAnswer
from amaris_cli.prompts import render
from amaris_cli.vocabulary import hacking_lines


def analysis_digest(record: AnalysisRecord) -> dict[str, Any]:
    """What the summarizer sees of one analysis: compact, so a chunk fits one prompt."""
    a = record.analysis
    assert a is not None
    return {
        "rollout_id": record.rollout_id,
        "reward": record.reward,
        "assessment": a.overall_assessment,
        "hacking": [{"pattern": p.pattern, "severity": p.severity} for p in a.reward_hacking.patterns],
        "misjudged": a.rubric_judgement.misjudged,
        "missing_criteria": a.rubric_judgement.missing_criteria,
        "advancement": a.advancement_strategy,
    }


def stats_json(stats: StepStats) -> str:
    return compact_json(stats.model_dump(mode="json"))


async def summarize_chunk(kit: AgentKit, rubric: RubricSet, step: int, analyses: list[AnalysisRecord],
                          stats: StepStats, hacking: list[HackingCount], scope: str) -> Answer[SummaryAnswer]:
    progress = kit.progress(step)
    messages = render(
        kit.template("summarizer"),
        trusted={**progress.trusted, "scope": scope,
                 "n_rollouts": len(analyses), "mean_reward": fmt(stats.mean_reward), "stats": stats_json(stats)},
        untrusted={"hacking": hacking_lines(hacking, len(analyses)),
                   "analyses": json_lines([analysis_digest(a) for a in analyses])},
        max_chars=max(kit.max_chars, 4000 * max(1, len(analyses))),
        system_untrusted={"rubric": rubric_json(rubric), **progress.system_data},
    )
    return await kit.client.ask("summarizer", messages, SummaryAnswer, step=step, context=scope)


async def merge_chunks(kit: AgentKit, rubric: RubricSet, step: int, chunks: list[tuple[int, SummaryAnswer]],
                       stats: StepStats, hacking: list[HackingCount], analyzed: int) -> Answer[SummaryAnswer]:
    rows = [{"chunk": i, "n": n, "summary": s.model_dump(mode="json")} for i, (n, s) in enumerate(chunks)]
    progress = kit.progress(step)
    messages = render(
        kit.template("meta_summarizer"),
        trusted={**progress.trusted, "n_rollouts": sum(n for n, _ in chunks), "n_chunks": len(chunks),
                 "mean_reward": fmt(stats.mean_reward), "stats": stats_json(stats)},
        untrusted={"hacking": hacking_lines(hacking, analyzed), "chunks": json_lines(rows)},
        max_chars=max(kit.max_chars, 8000 * len(chunks)),
        system_untrusted={"rubric": rubric_json(rubric), **progress.system_data},
    )
    return await kit.client.ask("meta_summarizer", messages, SummaryAnswer, step=step, context="merge")
