"""Red team: a stage must never build on an upstream file that is itself out of date.

Each scenario is a run that a user can reach with ordinary commands, where a stage used to write a
result that looks valid but describes other data: a summary of the analyses of the rollouts a step
held before `score --force`, an update of the old summary (and the evolution marked done), analyses
and statistics of scores judged against a rubric that has since been edited.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from amaris_cli.simjudge.server import SimJudge
from tests.conftest import EXAMPLES, TEST_CONFIG, evolution, invoke, judge_env, read_jsonl, write_jsonl


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory, judge: SimJudge) -> Path:
    """Step 0 scored and evolved (analyses, summary, update, rubric version 1)."""
    base = tmp_path_factory.mktemp("evolved")
    config = base / "c.toml"
    config.write_text(TEST_CONFIG)
    run = base / "run"
    env = judge_env(judge)
    assert invoke("init", run, "--config", config).exit_code == 0
    for args in (("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0), ("evolve", "--run", run, "--step", 0)):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.stderr
    return run


@pytest.fixture
def run(evolved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(evolved, copy)
    return copy


def other_rollouts(tmp_path: Path) -> Path:
    """Step 1's rollouts under step 0's ids: a `score --force` that keeps the ids and changes the content."""
    ids = [row["id"] for row in read_jsonl(EXAMPLES / "math/step-000.jsonl")]
    rows = [{**row, "id": i, "step": 0} for i, row in zip(ids, read_jsonl(EXAMPLES / "math/step-001.jsonl"), strict=True)]
    return write_jsonl(tmp_path / "other.jsonl", rows)


def rescore(run: Path, tmp_path: Path, env: dict[str, str]) -> None:
    result = invoke("score", other_rollouts(tmp_path), "--run", run, "--step", 0, "--force", env=env)
    assert result.exit_code == 0, result.stderr


def test_update_right_after_a_rescore_does_not_reuse_the_update_of_the_old_scores(run, tmp_path, judge) -> None:
    env = judge_env(judge)
    step0 = run / "steps/000000"
    old_update, old_rubric = (step0 / "update.json").read_bytes(), (run / "rubrics/step-000001.json").read_bytes()
    rescore(run, tmp_path, env)
    result = invoke("update", "--run", run, "--step", 0, env=env)
    # The summary describes the rollouts the step held before: updating from it is a stale result.
    assert result.exit_code == 2, result.stderr
    assert "summary.json" in result.stderr and "amaris summarize" in result.stderr, result.stderr
    assert (step0 / "update.json").read_bytes() == old_update
    assert (run / "rubrics/step-000001.json").read_bytes() == old_rubric
    assert evolution(run) is None, "an update of stale inputs must not mark the evolution done"


def test_summarize_right_after_a_rescore_does_not_summarize_the_old_analyses(run, tmp_path, judge) -> None:
    env = judge_env(judge)
    step0 = run / "steps/000000"
    old_summary = (step0 / "summary.json").read_bytes()
    rescore(run, tmp_path, env)
    result = invoke("summarize", "--run", run, "--step", 0, env=env)
    assert result.exit_code == 2, result.stderr
    assert "analyses.jsonl" in result.stderr and "amaris analyze" in result.stderr, result.stderr
    assert (step0 / "summary.json").read_bytes() == old_summary
    # the way out works: analyze, then summarize, now from the new analyses
    for cmd in ("analyze", "summarize"):
        done = invoke(cmd, "--run", run, "--step", 0, env=env)
        assert done.exit_code == 0, done.stderr
    analyses = {a["rollout_id"]: a for a in read_jsonl(step0 / "analyses.jsonl")}
    scores = {s["rollout_id"]: s for s in read_jsonl(step0 / "scores.jsonl")}
    assert all(analyses[i]["reward"] == pytest.approx(scores[i]["reward"], abs=1e-6) for i in scores)


def test_a_rubric_edited_after_scoring_makes_the_scores_stale_not_the_base_of_an_evolution(run, judge) -> None:
    env = judge_env(judge)
    step0 = run / "steps/000000"
    (run / "steps/000000/analyses.jsonl").unlink()  # as if the step had only been scored
    rubric_path = run / "rubrics/step-000000.json"
    rubric = json.loads(rubric_path.read_text())
    rubric["adaptive"] = [{"id": "is-concise", "kind": "reward", "text": "The response is concise.", "weight": 3.0}]
    rubric_path.write_text(json.dumps(rubric))

    stale = json.loads(invoke("inspect", run, "--step", 0, "--json").stdout)["detail"]["stale"]
    assert "scores.jsonl" in stale, stale
    result = invoke("evolve", "--run", run, "--step", 0, env=env)
    # The verdicts were given against criteria the rubric no longer has: analyzing them against the
    # edited rubric would describe a judgement that never happened (stats with n = 0 for "is-concise").
    assert result.exit_code == 2, result.stderr
    assert "scores.jsonl" in result.stderr and "amaris score" in result.stderr, result.stderr
    assert not (step0 / "analyses.jsonl").exists()

    again = invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, env=env)
    assert again.exit_code == 0, again.stderr
    evolved = invoke("evolve", "--run", run, "--step", 0, env=env)
    assert evolved.exit_code == 0, evolved.stderr
    stats = json.loads((step0 / "stats.json").read_text())
    assert {c["criterion_id"]: c["n"] for c in stats["criteria"]} == {"correct-answer": 16, "is-concise": 16}
