"""The analyzer: one deep analysis per rollout (hacking, stage performance, rubric judgement)."""

from __future__ import annotations

from amaris_cli.agents.common import AgentKit, compact_json, rubric_json
from amaris_cli.models import AnalysisAnswer, AnalysisRecord, Rollout, RubricSet, ScoreRecord
from amaris_cli.prompts import render
from amaris_cli.vocabulary import vocabulary_text


def analyzer_messages(kit: AgentKit, rubric: RubricSet, rollout: Rollout, score: ScoreRecord, step: int) -> list[dict[str, str]]:
    verdicts = [v.model_dump(mode="json") for v in score.verdicts] if score.status == "scored" else {"status": "failed", "error": score.error}
    return render(
        kit.template("analyzer"),
        trusted={"training": kit.training(step), "rubric": rubric_json(rubric), "step": step,
                 "hacking_vocabulary": vocabulary_text(),
                 "reward": "None" if score.reward is None or score.status != "scored" else f"{score.reward:.3f}"},
        untrusted={"prompt": rollout.input, "reference": rollout.supplemental_context or "",
                   "response": rollout.output, "verdicts": compact_json(verdicts)},
        max_chars=kit.max_chars,
    )


async def analyze_rollout(kit: AgentKit, rubric: RubricSet, rollout: Rollout, score: ScoreRecord, step: int) -> AnalysisRecord:
    answer = await kit.client.ask("analyzer", analyzer_messages(kit, rubric, rollout, score, step), AnalysisAnswer,
                                  step=step, context=rollout.id)
    reward = score.reward if score.status == "scored" else None
    if answer.value is None:
        return AnalysisRecord(rollout_id=rollout.id, step=step, reward=reward, status="failed", error=answer.error,
                              instance_id=rubric.instance_id)
    return AnalysisRecord(rollout_id=rollout.id, step=step, reward=reward, status="analyzed", analysis=answer.value,
                          instance_id=rubric.instance_id)
