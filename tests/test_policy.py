"""The failure policy (`--on-error fail|skip|neutral`) in the stage commands run one by one.

Under `fail` (the default) a step whose scores or analyses failed goes no further: not summarized,
not updated (README, "The failure policy"). `analyze` exits 4 for such a step, but `summarize` and
`update` run one by one used to go on: a summary of 8 of 16 analyses, the next rubric version from
it, and the step's evolution marked done. And the message of a step stopped for its failed scores
must say how to retry them: re-running `evolve` does not.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLES, evolution, invoke, judge_env, new_run


def test_summarize_and_update_do_not_go_on_from_failed_analyses_under_fail(tmp_path, sim_factory) -> None:
    judge = sim_factory(agent_fault_rate={"analyzer": 0.4})
    env = judge_env(judge)
    run = new_run(tmp_path)
    assert invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, env=env).exit_code == 0
    assert invoke("analyze", "--run", run, "--step", 0, env=env).exit_code == 4
    summarized = invoke("summarize", "--run", run, "--step", 0, env=env)
    assert summarized.exit_code == 4, summarized.stderr
    assert "could not be analyzed" in summarized.stderr and "--on-error" in summarized.stderr
    assert not (run / "steps/000000/summary.json").exists()
    updated = invoke("update", "--run", run, "--step", 0, env=env)
    assert updated.exit_code != 0 and not (run / "rubrics/step-000001.json").exists()
    assert evolution(run) is None
    # the documented way on: skip the failed analyses, explicitly
    skipped = invoke("summarize", "--run", run, "--step", 0, "--on-error", "skip", env=env)
    assert skipped.exit_code == 0, skipped.stderr
    summary = json.loads((run / "steps/000000/summary.json").read_text())
    assert 0 < summary["n_analyzed"] < summary["n_rollouts"] == 16


def test_an_evolution_stopped_by_failed_scores_says_to_score_again(tmp_path, sim_factory) -> None:
    judge = sim_factory(agent_fault_rate={"scorer": 0.3})
    env = judge_env(judge)
    run = new_run(tmp_path)
    scored = invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, "--on-error", "skip", env=env)
    assert scored.exit_code == 0, scored.stderr
    # The step was scored under skip, which its evolution keeps unless told otherwise: asked for fail, it stops.
    result = invoke("evolve", "--run", run, "--step", 0, "--on-error", "fail", env=env)
    assert result.exit_code == 4
    # re-running evolve never retries a score: the message must name the command that does
    assert f"amaris score ROLLOUTS.jsonl --run {run} --step 0" in result.stderr, result.stderr
    assert "re-run the same command" not in result.stderr


def test_failed_step_carry_evolves_a_step_with_failed_records_as_skipped(tmp_path, sim_factory) -> None:
    """`--failed-step carry` (what `serve` gives its evolutions): under fail, a step with failed scores is not
    analyzed, its summary is amaris's account of the gap and the rubric is carried forward; one with failed
    analyses likewise. `loop` goes on past such a step instead of stopping, and a replay repeats it."""
    judge = sim_factory(agent_fault_rate={"scorer": 0.3})
    env = judge_env(judge)
    run = new_run(tmp_path)
    assert invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, env=env).exit_code == 4
    result = invoke("evolve", "--run", run, "--step", 0, "--failed-step", "carry", env=env)
    assert result.exit_code == 0, result.stderr
    assert "it evolved as skipped" in result.stderr and "could not be judged" in result.stderr
    assert not (run / "steps/000000/analyses.jsonl").exists()
    summary = json.loads((run / "steps/000000/summary.json").read_text())
    assert summary["skipped"]["analyzed"] == 0 and 0 < summary["skipped"]["judged"] < 16
    assert json.loads((run / "rubrics/step-000001.json").read_text())["adaptive"] == \
        json.loads((run / "rubrics/step-000000.json").read_text())["adaptive"]

    analyzer = sim_factory(agent_fault_rate={"analyzer": 0.4})
    run = new_run(tmp_path, "analyses")
    looped = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", "--failed-step", "carry",
                    env=judge_env(analyzer))
    assert looped.exit_code == 0, looped.stderr
    first = json.loads((run / "steps/000000/summary.json").read_text())
    assert "could not be analyzed" in first["skipped"]["reason"] and first["skipped"]["analyzed"] > 0
    stopped = invoke("loop", EXAMPLES / "math", "--run", new_run(tmp_path, "stop"), "--steps", "0:1",
                     env=judge_env(analyzer))
    assert stopped.exit_code == 4
    replayed = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert replayed.exit_code == 0, replayed.stderr
    assert json.loads((tmp_path / "replayed/steps/000000/summary.json").read_text()) == first


@pytest.mark.parametrize("agent", ["summarizer", "updater"])
def test_failed_step_carry_also_carries_a_step_whose_summarizer_or_updater_gave_no_answer(tmp_path, sim_factory,
                                                                                          agent) -> None:
    """`carry` is for training that must go on (serve's): an unusable summarizer or updater answer failed the
    step's evolution all the same, and every later step of a served run was a 409."""
    env = judge_env(sim_factory(agent_faults={agent: "wrong_shape"}))
    run = new_run(tmp_path)
    assert invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, env=env).exit_code == 0
    assert invoke("evolve", "--run", run, "--step", 0, env=env).exit_code != 0
    carried = invoke("evolve", "--run", run, "--step", 0, "--failed-step", "carry", env=env)
    assert carried.exit_code == 0, carried.stderr
    assert f"the {agent} failed" in evolution(run)["skipped"]
    assert json.loads((run / "rubrics/step-000001.json").read_text())["adaptive"] == \
        json.loads((run / "rubrics/step-000000.json").read_text())["adaptive"]
