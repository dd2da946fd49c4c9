"""Group (relative) scoring: one call per prompt, identical outputs judged once, same verdicts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EXAMPLES, calls, invoke, judge_env, new_run, scores

GROUPS = EXAMPLES / "math_groups" / "step-000.jsonl"


def scored(tmp: Path, sim, name: str, *flags: str) -> tuple[dict[str, dict], list[dict]]:
    run = new_run(tmp, name)
    result = invoke("score", GROUPS, "--run", run, "--step", "0", *flags, env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    return scores(run), calls(run)


def test_group_scoring_gives_the_same_verdicts_with_one_call_per_prompt_and_fewer_tokens(tmp_path: Path, sim) -> None:
    single, single_calls = scored(tmp_path, sim, "single")
    grouped, group_calls = scored(tmp_path, sim, "grouped", "--group-by", "input")
    assert len(single_calls) == 16 and len(group_calls) == 4
    assert grouped == single, "verdicts and rewards must not depend on how the judge was asked"
    first = group_calls[0]["messages"][1]["content"]
    assert first.count("<<<BEGIN RESPONSE_") == 3, "the identical output must be sent once"
    assert first.count("<<<BEGIN PROMPT ") == 1 and "The 3 responses to judge" in first
    per_rollout = sum(c["usage"]["prompt_tokens"] for c in single_calls) / 16
    per_rollout_grouped = sum(c["usage"]["prompt_tokens"] for c in group_calls) / 16
    assert per_rollout_grouped < per_rollout / 2.5


def test_a_group_answer_with_a_missing_response_is_reasked(tmp_path: Path, sim_factory) -> None:
    bad = json.dumps({"responses": [{"response": 1, "verdicts": [
        {"criterion_id": "correct-answer", "score": 1, "reason": "x"}, {"criterion_id": "shows-reasoning", "score": 1, "reason": "x"}]}]})
    judge = sim_factory(scripted={"group_scorer": [bad]})
    grouped, calls = scored(tmp_path, judge, "reask", "--group-by", "input")
    assert all(r["status"] == "scored" for r in grouped.values())
    reask = [c for c in calls if "could not be used" in c["messages"][-1]["content"]]
    assert len(reask) == 1 and "expected one entry for each response 1..3" in reask[0]["messages"][-1]["content"]
