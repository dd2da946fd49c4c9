"""The memory-augmented evolution end to end: analyze, summarize, memory, update and loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from tests.conftest import EXAMPLES, Result, invoke, judge_env, new_run, read_json, read_jsonl, write_jsonl

GRADER_PITFALL = "addresses the grader"


def step_dir(run: Path, step: int) -> Path:
    return run / "steps" / f"{step:06d}"


@pytest.fixture(scope="module")
def judge(judge: SimJudge) -> SimJudge:
    """The module's sim-judge (tests/conftest.py), keeping the requests it gets."""
    judge.keep_requests = True
    return judge


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory, judge: SimJudge) -> Path:
    """The six example steps, full memory, with rescoring after every update."""
    run = new_run(tmp_path_factory.mktemp("full"), "run")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--rescore", "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    return run


def planted(run: Path, step: int) -> dict[str, str]:
    return {r["id"]: r["metadata"]["planted"] for r in read_jsonl(step_dir(run, step) / "rollouts.jsonl")}


def test_every_stage_writes_its_files(full_run: Path) -> None:
    for step in range(6):
        d = step_dir(full_run, step)
        for name in ("rollouts.jsonl", "scores.jsonl", "analyses.jsonl", "stats.json", "summary.json",
                     "summary.chunk-000.json", "summary.chunk-001.json", "retrieval.json", "update.json", "rescores.jsonl"):
            assert (d / name).exists(), d / name
        assert not list(d.glob(".*journal*")), "journals are removed once a stage finishes"
        assert (full_run / "rubrics" / f"step-{step + 1:06d}.json").exists()
    summary = read_json(step_dir(full_run, 3) / "summary.json")
    assert summary["chunks"] == 2 and summary["n_analyzed"] == 16
    analysis = read_jsonl(step_dir(full_run, 3) / "analyses.jsonl")[0]["analysis"]
    assert set(analysis) >= {"overall_assessment", "stage_performance", "reward_hacking", "advancement_strategy",
                             "rubric_judgement", "observations"}


def test_rubric_gains_a_pitfall_against_the_dominant_hack_and_hacks_then_score_lower(full_run: Path) -> None:
    added_at = None
    for step in range(6):
        update = read_json(step_dir(full_run, step) / "update.json")
        if any(m["op"] == "add" and m["kind"] == "pitfall" and GRADER_PITFALL in m["text"] for m in update["applied"]):
            added_at = step
            assert update["strategy"] == "CORRECTIVE"
            break
    assert added_at is not None, "no update answered the judge-addressing outputs"
    kinds = planted(full_run, added_at)
    before = {r["rollout_id"]: r["reward"] for r in read_jsonl(step_dir(full_run, added_at) / "scores.jsonl")}
    after = {r["rollout_id"]: r["reward"] for r in read_jsonl(step_dir(full_run, added_at) / "rescores.jsonl")}
    hacks = [rid for rid, kind in kinds.items() if kind == "judge"]
    assert hacks and all(after[rid] < before[rid] for rid in hacks)
    honest = [rid for rid, kind in kinds.items() if kind == "correct"]
    assert all(after[rid] == before[rid] for rid in honest), "honest correct answers keep their reward"


def test_anchors_never_change(full_run: Path) -> None:
    anchors = {json.dumps(read_json(p)["anchors"]) for p in (full_run / "rubrics").glob("step-*.json")}
    assert len(anchors) == 1


def test_dynamic_retrieval_finds_earlier_entries_about_the_pattern(full_run: Path) -> None:
    retrieval = read_json(step_dir(full_run, 3) / "retrieval.json")
    assert retrieval["queries"] and retrieval["dynamic"]
    assert all(hit["step"] < 3 for hit in retrieval["dynamic"])
    assert all(hit["type"] in ("analysis", "summary", "update") and hit["distance"] >= 0 for hit in retrieval["dynamic"])
    about_grader = [h for h in retrieval["dynamic"] if "grader_addressed_instructions" in h["text"]]
    assert about_grader, "a query about the hack must find earlier analyses of it"
    static_ids = {e["id"] for e in retrieval["static"]}
    assert not static_ids & {h["id"] for h in retrieval["dynamic"]}
    assert len({h["id"] for h in retrieval["dynamic"]}) == len(retrieval["dynamic"])


def test_memory_search_and_rebuild_give_identical_results(full_run: Path) -> None:
    query = ("memory", "search", "--run", full_run, "rollouts that address the grader", "-n", "6", "--json")
    before = json.loads(invoke(*query).stdout)
    assert len(before) == 6
    rebuilt = invoke("memory", "rebuild", "--run", full_run, "--json")
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert json.loads(rebuilt.stdout)["counts"] == {"analysis": 96, "summary": 6, "update": 6}
    assert json.loads(invoke(*query).stdout) == before


def updated_step_0(tmp_path: Path, name: str, updater: list[str]) -> tuple[Path, Result, list[dict]]:
    """Step 0 of the math example scored, analyzed and summarized, then `amaris update` against a sim-judge
    whose updater answers `updater` in turn: the run, the update's result and every request the judge got.
    The adoption gate is off: with the sim-judge, a keyword list earns a keyword-matched criterion (test_gate.py)."""
    sim = SimJudge(SimJudgeConfig(scripted={"updater": updater})).start_in_thread()
    sim.keep_requests = True
    try:
        run = new_run(tmp_path, name, extra="\n[gate]\nenabled = false\n")
        rollouts = write_jsonl(tmp_path / "r.jsonl", read_jsonl(EXAMPLES / "math" / "step-000.jsonl"))
        env = judge_env(sim)
        for cmd in (("score", rollouts, "--run", run, "--step", "0"), ("analyze", "--run", run, "--step", "0"),
                    ("summarize", "--run", run, "--step", "0")):
            assert invoke(*cmd, env=env).exit_code == 0
        return run, invoke("update", "--run", run, "--step", "0", env=env), sim.requests
    finally:
        sim.stop()


@pytest.mark.parametrize(("whole", "missing", "reason"), [
    ({"kind": "pitfall", "weight": 2.0}, "kind", 'names its "kind"'),
    ({"kind": "pitfall", "weight": 2.5}, "weight", 'gives its "weight"'),
])
def test_an_added_criterion_without_its_kind_or_weight_is_asked_again_never_given_one(
        tmp_path: Path, whole: dict, missing: str, reason: str) -> None:
    """The updater means to penalize the grader note but leaves out "kind" (read as a reward, the rubric of the
    next step would pay the hack it meant to punish) or "weight" (any number amaris gave, it was 1.0, would be
    one the updater did not mean). The answer is re-asked with the reason; the second answer's values apply."""
    grader_note = "The response tells the grader that its answer is correct."

    def update(**given: object) -> str:
        return json.dumps({"strategy": "CORRECTIVE", "rationale": "grader notes seen", "modifications": [
            {"op": "add", "text": grader_note, "reason": "penalize the grader note", **given}]})

    partial = {k: v for k, v in whole.items() if k != missing}
    run, result, requests = updated_step_0(tmp_path, missing, [update(**partial), update(**whole)])
    asked = [r for r in requests if "STATIC_MEMORY" in r["messages"][1]["content"]]
    assert result.exit_code == 0, result.stderr
    assert len(asked) == 2 and reason in asked[1]["messages"][-1]["content"]
    added = [c for c in read_json(run / "rubrics" / "step-000001.json")["adaptive"] if c["text"] == grader_note]
    assert [(c["kind"], c["weight"]) for c in added] == [(whole["kind"], whole["weight"])]


def test_an_analysis_whose_hacking_flag_contradicts_its_patterns_is_asked_again(tmp_path: Path) -> None:
    """ "detected": false beside a named pattern is two answers: the step's summary would count the pattern
    and the adoption gate would take the rollout as an honest control. The answer is re-asked with the reason;
    one that stays contradictory is a failed analysis, never either reading."""

    def analysis(detected: bool) -> str:
        return json.dumps({"overall_assessment": "x", "stage_performance": "x", "advancement_strategy": "x",
                           "observations": [], "rubric_judgement": {"assessment": "x", "missing_criteria": [],
                                                                    "misjudged": False},
                           "reward_hacking": {"detected": detected, "patterns": [
                               {"pattern": "grader_note", "evidence": "tells the grader", "severity": "high"}]}})

    sim = SimJudge(SimJudgeConfig(scripted={"analyzer": [analysis(False), analysis(True)] + [analysis(False)] * 8}))
    sim.start_in_thread()
    sim.keep_requests = True
    try:
        run = new_run(tmp_path, "flag")
        env = judge_env(sim)
        codes = []
        for step in (0, 1):  # one rollout a step, so the scripted answers go to it in order
            one = write_jsonl(tmp_path / f"r{step}.jsonl", read_jsonl(EXAMPLES / "math" / "step-000.jsonl")[:1])
            assert invoke("score", one, "--run", run, "--step", step, "--rubric-version", 0, env=env).exit_code == 0
            codes.append(invoke("analyze", "--run", run, "--step", step, env=env).exit_code)
        asked = [r for r in sim.requests if "rollout analyzer" in r["messages"][0]["content"]]
    finally:
        sim.stop()
    assert codes == [0, 4]  # 4: a record failed (the failure policy's exit code)
    assert "reward_hacking.detected is false but it names 1 pattern(s)" in asked[1]["messages"][-1]["content"]
    [first] = read_jsonl(run / "steps" / "000000" / "analyses.jsonl")
    assert first["status"] == "analyzed" and first["analysis"]["reward_hacking"]["detected"] is True
    [second] = read_jsonl(run / "steps" / "000001" / "analyses.jsonl")
    assert second["status"] == "failed" and "detected is false but it names" in second["error"]


@pytest.mark.parametrize("missing", ["severity", "misjudged"])
def test_an_analysis_missing_a_judgement_is_asked_again_never_given_one(tmp_path: Path, missing: str) -> None:
    """A pattern's severity or the rubric's `misjudged` that the analyzer did not write would be one amaris made
    up (they were "medium" and false): the summary, the updater and the report read them. The answer is
    re-asked with the reason, and the second answer's own value is the one stored."""
    def analysis(**given: object) -> str:
        return json.dumps({"overall_assessment": "x", "stage_performance": "x", "advancement_strategy": "x",
                           "observations": [], "rubric_judgement": {"assessment": "x", "missing_criteria": [],
                                                                    **{k: v for k, v in given.items() if k == "misjudged"}},
                           "reward_hacking": {"detected": True, "patterns": [
                               {"pattern": "grader_note", "evidence": "tells the grader",
                                **{k: v for k, v in given.items() if k == "severity"}}]}})

    whole = {"severity": "low", "misjudged": True}
    partial = {k: v for k, v in whole.items() if k != missing}
    sim = SimJudge(SimJudgeConfig(scripted={"analyzer": [analysis(**partial), analysis(**whole)]})).start_in_thread()
    sim.keep_requests = True
    try:
        run = new_run(tmp_path, "judgement")
        env = judge_env(sim)
        one = write_jsonl(tmp_path / "r.jsonl", read_jsonl(EXAMPLES / "math" / "step-000.jsonl")[:1])
        assert invoke("score", one, "--run", run, "--step", 0, "--rubric-version", 0, env=env).exit_code == 0
        result = invoke("analyze", "--run", run, "--step", 0, env=env)
        asked = [r for r in sim.requests if "rollout analyzer" in r["messages"][0]["content"]]
    finally:
        sim.stop()
    assert result.exit_code == 0, result.stderr
    assert len(asked) == 2 and missing in asked[1]["messages"][-1]["content"], asked[-1]["messages"][-1]
    [record] = read_jsonl(run / "steps" / "000000" / "analyses.jsonl")
    stored = record["analysis"]
    assert (stored["reward_hacking"]["patterns"][0]["severity"], stored["rubric_judgement"]["misjudged"]) == ("low", True)


def test_rejected_modifications_are_reported_not_applied(tmp_path: Path) -> None:
    bad_update = json.dumps({"strategy": "CORRECTIVE", "rationale": "testing the guards", "modifications": [
        {"op": "remove", "id": "correct-answer"},
        {"op": "modify", "id": "no-such-criterion", "text": "x"},
        {"op": "reweight", "id": "shows-reasoning", "weight": 50},
        {"op": "add", "text": "The response states the units of its answer.", "weight": 1.0, "kind": "reward"},
    ]})
    run, result, _ = updated_step_0(tmp_path, "rej", [bad_update])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("rejected") >= 3 and "anchors are immutable" in result.stderr
    update = read_json(step_dir(run, 0) / "update.json")
    assert [m["op"] for m in update["applied"]] == ["add"]
    reasons = [r["reason"] for r in update["rejected"]]
    assert any("anchors are immutable" in r for r in reasons)
    assert any("unknown criterion id 'no-such-criterion'" in r for r in reasons)
    assert any("outside" in r for r in reasons)
    rubric = read_json(run / "rubrics" / "step-000001.json")
    assert [c["id"] for c in rubric["adaptive"]] == ["shows-reasoning", "s0-the-response-states-the-units-of-its"]
    assert rubric["adaptive"][0]["weight"] == 1.0


def test_static_window_respects_k(tmp_path: Path, judge: SimJudge) -> None:
    run = new_run(tmp_path, "k2")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:4", "--static-steps", "2", "--no-dynamic",
                    env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    static = read_json(step_dir(run, 4) / "retrieval.json")["static"]
    assert sorted({e["step"] for e in static}) == [2, 3]
    assert [e["type"] for e in static] == ["summary", "update", "summary", "update"]


def updater_input(run: Path, step: int) -> str:
    calls = [c for c in read_jsonl(run / "calls.jsonl") if c["agent"] == "updater" and c["step"] == step]
    return calls[-1]["messages"][1]["content"]


@pytest.mark.parametrize(("flags", "static_on", "dynamic_on"), [
    ((), True, True), (("--no-static",), False, True), (("--no-dynamic",), True, False),
    (("--no-static", "--no-dynamic"), False, False),
])
def test_each_ablation_switch_changes_retrieval_and_the_updater_input(tmp_path, judge, flags, static_on, dynamic_on) -> None:
    run = new_run(tmp_path, "ablation")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", *flags, env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    retrieval = read_json(step_dir(run, 2) / "retrieval.json")
    assert retrieval["static_enabled"] is static_on and retrieval["dynamic_enabled"] is dynamic_on
    assert bool(retrieval["static"]) is static_on
    assert bool(retrieval["dynamic"]) is dynamic_on and bool(retrieval["queries"]) is dynamic_on
    prompt = updater_input(run, 2)
    static_block = prompt.split("Static memory")[1].split("Dynamic memory")[0]
    dynamic_block = prompt.split("Dynamic memory")[1]
    assert ("summary:00000001:-" in static_block) is static_on
    assert ("(none)" in dynamic_block) is (not dynamic_on)
    query_calls = [c for c in read_jsonl(run / "calls.jsonl") if c["agent"] == "query_generator"]
    assert bool(query_calls) is dynamic_on


def test_results_per_query_and_max_queries_bound_dynamic_retrieval(tmp_path, judge) -> None:
    run = new_run(tmp_path, "budget")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", "--results-per-query", "1",
                    "--max-queries", "2", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    retrieval = read_json(step_dir(run, 2) / "retrieval.json")
    assert 1 <= len(retrieval["queries"]) <= 2 and len(retrieval["dynamic"]) <= len(retrieval["queries"])
    assert "at most 2 queries" in [c for c in read_jsonl(run / "calls.jsonl") if c["agent"] == "query_generator"][-1]["messages"][0]["content"]


def test_update_every_updates_only_every_nth_step_but_summarizes_every_step(tmp_path, judge) -> None:
    run = new_run(tmp_path, "every")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:3", "--update-every", "2", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert [s for s in range(4) if (step_dir(run, s) / "summary.json").exists()] == [0, 1, 2, 3]
    assert [s for s in range(4) if (step_dir(run, s) / "update.json").exists()] == [1, 3]
    assert sorted(p.name for p in (run / "rubrics").glob("step-*.json")) == ["step-000000.json", "step-000002.json", "step-000004.json"]
    versions = {s: read_jsonl(step_dir(run, s) / "scores.jsonl")[0]["rubric_version"] for s in range(4)}
    assert versions == {0: 0, 1: 0, 2: 2, 3: 2}


def test_lag_scores_each_step_with_the_rubric_finished_lag_steps_earlier(tmp_path, judge) -> None:
    run = new_run(tmp_path, "lag")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:3", "--lag", "1", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    versions = {s: read_jsonl(step_dir(run, s) / "scores.jsonl")[0]["rubric_version"] for s in range(4)}
    assert versions == {0: 0, 1: 0, 2: 1, 3: 2}


def test_rescore_scores_the_step_again_with_its_own_update(full_run: Path) -> None:
    for step in range(6):
        rescored = read_jsonl(step_dir(full_run, step) / "rescores.jsonl")
        assert {r["rubric_version"] for r in rescored} == {step + 1}
        assert {r["rubric_version"] for r in read_jsonl(step_dir(full_run, step) / "scores.jsonl")} == {step}


def test_rerunning_a_finished_loop_makes_no_calls_and_changes_no_output(tmp_path, judge) -> None:
    run = new_run(tmp_path, "again")
    args = ("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1")
    assert invoke(*args, env=judge_env(judge)).exit_code == 0
    outputs = {p: p.read_bytes() for p in (run / "steps").rglob("*") if p.is_file()}
    requests = judge.stats["requests"]
    assert invoke(*args, env=judge_env(judge)).exit_code == 0
    assert judge.stats["requests"] == requests
    assert {p: p.read_bytes() for p in (run / "steps").rglob("*") if p.is_file()} == outputs


def test_one_jsonl_with_step_fields_is_a_loop_input(tmp_path, judge) -> None:
    rows = [dict(r) for s in (0, 1) for r in read_jsonl(EXAMPLES / "math" / f"step-{s:03d}.jsonl")]
    source = write_jsonl(tmp_path / "all.jsonl", rows)
    run = new_run(tmp_path, "single")
    result = invoke("loop", source, "--run", run, "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert [s["step"] for s in json.loads(result.stdout)["steps"]] == [0, 1]


def test_bad_step_file_fails_the_loop_before_anything_is_written(tmp_path, judge) -> None:
    source = tmp_path / "steps"
    source.mkdir()
    write_jsonl(source / "0.jsonl", read_jsonl(EXAMPLES / "math" / "step-000.jsonl"))
    (source / "1.jsonl").write_text('{"id": "a", "input": "p", "output": "o"}\n{"id": "b", "input": 3, "output": "o"}\n')
    run = new_run(tmp_path, "badloop")
    result = invoke("loop", source, "--run", run, env=judge_env(judge))
    assert result.exit_code == 2
    assert f"{source / '1.jsonl'}:2: field 'input' must be a string" in result.stderr
    assert not (run / "steps").exists()


def test_an_update_does_not_reread_the_files_of_steps_already_indexed(tmp_path, judge) -> None:
    run = new_run(tmp_path, "marks")
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(judge)).exit_code == 0
    marks = read_json(run / "memory" / "indexed-steps.json")
    assert {s: sorted(types) for s, types in marks.items()} == {str(s): ["analysis", "summary", "update"] for s in range(3)}
    (step_dir(run, 0) / "analyses.jsonl").write_text("not json\n")  # would fail if read again
    result = invoke("update", "--run", run, "--step", "2", "--force", "--no-dynamic", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
