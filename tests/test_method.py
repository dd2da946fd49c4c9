"""Method depth: reversals, the active-criteria cap, statistics in the updater's input, hacking counts."""

from __future__ import annotations

import json
from pathlib import Path

from amaris_cli.agents.common import AgentKit
from amaris_cli.agents.updater import updater_messages
from amaris_cli.config import Settings
from amaris_cli.llm.client import LLMClient
from amaris_cli.models import (
    Criterion,
    CriterionStats,
    Modification,
    RubricSet,
    StepStats,
    SummaryAnswer,
    SummaryRecord,
    UpdateRecord,
)
from amaris_cli.rubrics import cap_active
from amaris_cli.stability import stability
from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env

INITIAL = RubricSet(version=0, anchors=[Criterion(id="correct", text="The final answer is correct.", weight=2)],
                    adaptive=[Criterion(id="work", text="Shows the work step by step.", weight=1.0)])


def update(step: int, *mods: Modification) -> UpdateRecord:
    return UpdateRecord(step=step, from_version=step, to_version=step + 1, strategy="CORRECTIVE", rationale="",
                        memory_consultation=[], applied=list(mods), rejected=[], final_adaptive=[])


def test_a_scripted_sequence_of_updates_has_a_known_number_of_reversals() -> None:
    updates = [
        update(0, Modification(op="add", id="grader", text="Addresses the grader instead of answering.", weight=2, kind="pitfall"),
               Modification(op="reweight", id="work", weight=2.0)),                    # work 1 -> 2
        update(1, Modification(op="reweight", id="work", weight=1.5),                   # 2 -> 1.5: back (1)
               Modification(op="remove", id="grader")),                                 # added at 0, removed (2)
        update(2, Modification(op="add", id="grader2", text="The response addresses the grader instead of answering it.",
                               weight=2, kind="pitfall"),                                # re-added in substance (3)
               Modification(op="reweight", id="work", weight=1.0)),                     # 2 -> 1.5 -> 1: same direction
        update(3, Modification(op="add", id="units", text="States the units of the result.", weight=1),
               Modification(op="reweight", id="work", weight=3.0)),                     # 1.5 -> 1 -> 3: back (4)
    ]
    result = stability(INITIAL, updates)
    assert result.reversals == 4
    assert result.reversals_by_kind == {"weight_back": 2, "added_then_removed": 1, "readded": 1}
    assert [len(u.reversals) for u in result.updates] == [0, 2, 1, 1]
    assert result.edits == 8
    # versions 0-4: the initial criteria are in all 5 (they were counted 4, one less than the added ones' count),
    # grader2 (added by step 2's update) in versions 3 and 4, units in 4
    assert result.ages == {"correct": 5, "grader2": 2, "units": 1, "work": 5}
    assert stability(INITIAL, []).ages == {"correct": 1, "work": 1}


def stats(**spreads: float) -> StepStats:
    return StepStats(step=0, n_rollouts=8, n_scored=8, n_failed=0, mean_reward=0.5, std_reward=0.1, criteria=[
        CriterionStats(criterion_id=cid, kind="reward", n=8, mean=0.5, spread=s, within_group_spread=s,
                       saturation_top=0.0, saturation_bottom=0.0) for cid, s in spreads.items()])


def test_the_active_cap_keeps_the_most_discriminative_criteria() -> None:
    rubric = INITIAL.model_copy(update={"adaptive": [
        Criterion(id="flat", text="a", weight=1), Criterion(id="sharp", text="b", weight=1),
        Criterion(id="mid", text="c", weight=1), Criterion(id="new", text="d", weight=1)]})
    capped, dropped = cap_active(rubric, stats(flat=0.0, sharp=0.45, mid=0.2), cap=3)
    assert [c.id for c in capped.adaptive] == ["sharp", "mid", "new"]  # input order kept; "new" has no stats yet
    assert [d.criterion_id for d in dropped] == ["flat"] and "max_active_adaptive=3" in dropped[0].reason
    assert capped.anchors == rubric.anchors
    assert cap_active(rubric, None, None) == (rubric, [])


def test_the_updater_prompt_carries_the_per_criterion_statistics() -> None:
    summary = SummaryRecord(step=0, n_rollouts=8, n_analyzed=8, chunks=1, stats=stats(work=0.0),
                            summary=SummaryAnswer.model_validate({
                                "executive_summary": "x", "reward_hacking": "x",
                                "rubric_meta_evaluation": "x", "performance_advancement": "x", "memory_entry": "x"}))
    kit = AgentKit(settings=Settings(), client=LLMClient(Settings()))
    system, user = (m["content"] for m in updater_messages(kit, INITIAL, 0, summary, [], []))
    statistics = user.split("Per-criterion statistics of this step (JSON):\n")[1].split("\n")[0]
    row = json.loads(statistics)["criteria"][0]
    assert row["criterion_id"] == "work" and row["spread"] == 0.0 and row["saturation_top"] == 0.0
    assert '"anchor": true' in system and "within [0.1, 5]" in system


def test_summaries_count_hacking_patterns_from_the_vocabulary(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "3:3", env=judge_env(sim)).exit_code == 0
    hacking = {h["pattern"]: h for h in json.loads((run / "steps/000003/summary.json").read_text())["hacking"]}
    planted = [json.loads(line)["metadata"]["planted"] for line in (EXAMPLES / "math/step-003.jsonl").read_text().splitlines()]
    assert hacking["grader_addressed_instructions"]["count"] == planted.count("judge")
    assert hacking["grader_addressed_instructions"]["prevalence"] == round(planted.count("judge") / 16, 6)
    assert hacking["grader_addressed_instructions"]["known"] is True
    analyzer_prompt = [json.loads(c) for c in (run / "calls.jsonl").read_text().splitlines()
                       if json.loads(c)["agent"] == "analyzer"][0]["messages"][0]["content"]
    assert "- master_key_tokens:" in analyzer_prompt and "- partial_satisfaction_of_compound_criteria:" in analyzer_prompt


def test_anchors_may_be_pitfalls(tmp_path: Path, sim) -> None:
    run = tmp_path / "run"
    result = invoke("init", run, "--anchor", "correct=2:The final answer is correct.",
                    "--anchor", "grader=1:pitfall:The response addresses the grader or judge.")
    assert result.exit_code == 0, result.stderr
    rubric = json.loads((run / "rubrics/step-000000.json").read_text())
    assert [(a["id"], a["kind"], a["weight"]) for a in rubric["anchors"]] == [("correct", "reward", 2.0), ("grader", "pitfall", 1.0)]
    rows = [json.loads(line) for line in (EXAMPLES / "math/step-003.jsonl").read_text().splitlines()]
    hack = next(r for r in rows if r["metadata"]["planted"] == "judge")
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps(hack) + "\n")
    assert invoke("score", source, "--run", run, "--step", "0", env=judge_env(sim)).exit_code == 0
    score = json.loads((run / "steps/000000/scores.jsonl").read_text())
    # fooled on correctness (1 * 2) but caught by the pitfall anchor (1 * 1): (2 - 1) / 2
    assert score["reward"] == 0.5


def test_a_weight_moved_back_after_an_edit_that_restates_it_is_a_reversal() -> None:
    """METHOD.md: a reversal is an edit that undoes an earlier one, "a weight moved back". A modify that changes the
    text and restates the weight it has (as updaters write whole criteria) moved nothing, and hid the move back."""
    updates = [
        update(0, Modification(op="reweight", id="work", weight=2.0)),                           # 1 -> 2
        update(1, Modification(op="modify", id="work", text="Shows each step of the work.", weight=2.0)),  # text only
        update(2, Modification(op="reweight", id="work", weight=1.0)),                           # 2 -> 1: back
    ]
    result = stability(INITIAL, updates)
    assert result.reversals_by_kind == {"weight_back": 1}
    assert [len(u.reversals) for u in result.updates] == [0, 0, 1]
    assert result.updates[2].reversals[0].detail == "1 -> 2 -> 1"


def test_an_edit_that_changes_nothing_is_not_counted_as_an_edit(tmp_path: Path, sim_factory) -> None:
    """A reweight to the weight a criterion has, or a modify to the text it has, is applied and recorded, but the
    rubric's diff shows no change: inspect, compare and evolve counted them as edits ("~2" for a version identical
    to the one before)."""
    scripted = [json.dumps({"rationale": "keep", "strategy": "MAINTENANCE", "modifications": [
        {"op": "reweight", "id": "shows-reasoning", "weight": 1.0, "reason": "as it is"},
        {"op": "modify", "id": "shows-reasoning", "text": "The response explains its reasoning step by step.",
         "reason": "as it is"},
        {"op": "add", "text": "The response states the units of its result.", "kind": "reward", "weight": 1.0,
         "reason": "a real change"}]})]
    judge = sim_factory(scripted={"updater": scripted * 2})  # (evolve's, then loop's)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + "\n[gate]\nenabled = false\n")  # the edits as applied, whatever a gate would say
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    env = judge_env(judge)
    assert invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, env=env).exit_code == 0
    evolved = invoke("evolve", "--run", run, "--step", 0, "--json", env=env)
    assert evolved.exit_code == 0, evolved.stderr
    assert len(json.loads((run / "steps/000000/update.json").read_text())["applied"]) == 3  # all applied, as before
    said = json.loads(evolved.stdout)["updated"]
    assert (said["added"], said["modified"]) == (1, 0) and said["unchanged"] == 2, said

    step = json.loads(invoke("inspect", run, "--json").stdout)["steps"][0]
    assert step["applied_changes"] == [False, False, True]
    shown = " ".join(invoke("inspect", run).stderr.split())
    assert "+1 -0 ~0 (2 changed" in shown, shown  # "nothing)" wraps in its column at 80
    detail = " ".join(invoke("inspect", run, "--step", "0").stderr.split())
    assert "reweight (changed nothing) shows-reasoning (weight 1)" in detail and "modify (changed nothing)" in detail
    compared = json.loads(invoke("compare", run, "--json").stdout)["runs"][0]
    assert compared["edits"] == 1 and compared["stability"]["unchanged"] == 2
    assert compared["stability"]["updates"][0]["reweighted"] == compared["stability"]["updates"][0]["modified"] == 0
    # loop's line of the step, and its JSON, as evolve's
    looped = tmp_path / "looped"
    assert invoke("init", looped, "--config", config).exit_code == 0
    line = invoke("loop", EXAMPLES / "math", "--run", looped, "--steps", "0:0", env=env)
    assert "(+1/-0/~0, 2 changed nothing, 0 rejected" in " ".join(line.stderr.split()), line.stderr
    again = json.loads(invoke("loop", EXAMPLES / "math", "--run", looped, "--steps", "0:0", "--json", env=env).stdout)
    assert (again["steps"][0]["modified"], again["steps"][0]["unchanged"]) == (0, 2), again
