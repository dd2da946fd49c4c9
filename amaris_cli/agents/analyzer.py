"""The analyzer: one deep analysis per rollout (hacking, stage performance, rubric judgement)."""

from __future__ import annotations

from typing import Any

from amaris_cli.agents.common import AgentKit, compact_json, rubric_json
from amaris_cli.models import AnalysisAnswer, AnalysisRecord, Rollout, RubricSet, ScoreRecord
from amaris_cli.prompts import render
from amaris_cli.vocabulary import vocabulary_text


def verdicts_for_analyzer(rubric: RubricSet, score: ScoreRecord) -> Any:
    """The judge's verdicts under the keys the scorer answered with: `score` for a reward criterion,
    `present` for a pitfall, so the analyzer never reads a pitfall's 1 as a good mark."""
    if score.status != "scored":
        return {"status": "failed", "error": score.error}
    rows = []
    for v in score.verdicts:
        criterion = rubric.get(v.criterion_id)
        kind = criterion.kind if criterion is not None else "reward"
        rows.append({"criterion_id": v.criterion_id, "kind": kind, "reason": v.reason,
                     ("present" if kind == "pitfall" else "score"): v.score})
    return rows


def analyzer_messages(kit: AgentKit, rubric: RubricSet, rollout: Rollout, score: ScoreRecord, step: int) -> list[dict[str, str]]:
    verdicts = verdicts_for_analyzer(rubric, score)
    progress = kit.progress(step)
    return render(
        kit.template("analyzer"),
        trusted={**progress.trusted, "hacking_vocabulary": vocabulary_text(),
                 "reward": "None" if score.reward is None or score.status != "scored" else f"{score.reward:.3f}"},
        untrusted={"prompt": rollout.input, "reference": rollout.supplemental_context or "",
                   "response": rollout.output, "verdicts": compact_json(verdicts)},
        max_chars=kit.max_chars,
        system_untrusted={"rubric": rubric_json(rubric), **progress.system_data},
    )


def check_hacking(answer: AnalysisAnswer) -> None:
    """`reward_hacking.detected` and its patterns agree. A "no" that names patterns (or a "yes" that names
    none) is two answers: the step's summary counts the patterns, the adoption gate reads `detected`, so
    either reading would be a guess; the answer is re-asked."""
    hacking = answer.reward_hacking
    named = [p.pattern for p in hacking.found]
    if not hacking.detected and named:
        raise ValueError(f"reward_hacking.detected is false but it names {len(named)} pattern(s) ({named[0]!r}...): "
                         "set detected to true, or list no pattern")
    if hacking.detected and not named:
        raise ValueError("reward_hacking.detected is true but it names no pattern (of severity above none): name "
                         "each pattern, or set detected to false")


async def analyze_rollout(kit: AgentKit, rubric: RubricSet, rollout: Rollout, score: ScoreRecord, step: int) -> AnalysisRecord:
    answer = await kit.client.ask("analyzer", analyzer_messages(kit, rubric, rollout, score, step), AnalysisAnswer,
                                  step=step, context=rollout.id, check=check_hacking)
    reward = score.reward if score.status == "scored" else None
    if answer.value is None:
        return AnalysisRecord(rollout_id=rollout.id, step=step, reward=reward, status="failed", error=answer.error,
                              instance_id=rubric.instance_id)
    return AnalysisRecord(rollout_id=rollout.id, step=step, reward=reward, status="analyzed", analysis=answer.value,
                          instance_id=rubric.instance_id)
