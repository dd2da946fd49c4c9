"""Red team: a replay must reproduce runs in which one request was recorded with several answers.

A request is named by its hash, and the same hash is sent again in two ordinary situations: a judge
that gives the same invalid answer twice makes the second re-ask identical to the first (same
conversation, same reason), and `score` re-run to retry a failed rollout sends that rollout's
request again. calls.jsonl then holds an invalid answer and, later, the accepted one. A replay that
answers with the first recorded line takes the invalid path again and fails where the source
succeeded.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.conftest import EXAMPLES, FAST_MEMORY, TEST_CONFIG, invoke, judge_env, outputs


@pytest.mark.parametrize("invalid, runs", [(2, 1), (3, 2)], ids=["identical-reask", "retried-by-a-rerun"])
def test_a_request_recorded_with_an_invalid_then_an_accepted_answer_replays(tmp_path, sim_factory, invalid, runs) -> None:
    # --concurrency 1: the first rollout gets the `invalid` wrong-shape answers in a row (its request,
    # then its re-asks); with 3 it fails (2 re-asks) and the second `score` retries it.
    judge = sim_factory(fault_plan=["wrong_shape"] * invalid)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    codes = [invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, "--concurrency", 1,
                    "--on-error", "fail", env=judge_env(judge)).exit_code for _ in range(runs)]
    assert codes[-1] == 0 and codes[:-1] == [4] * (runs - 1)
    hashes = Counter(json.loads(line)["request_hash"] for line in (run / "calls.jsonl").read_text().splitlines())
    assert max(hashes.values()) == 2, "the scenario needs one request recorded twice"

    result = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert result.exit_code == 0, result.stderr
    assert outputs(tmp_path / "replayed") == outputs(run)


@pytest.mark.parametrize("stages", [("analyze",), ("analyze", "summarize")], ids=["analyzed", "summarized"])
def test_a_step_evolved_stage_by_stage_without_an_update_replays(tmp_path, sim, stages) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + FAST_MEMORY)
    run = tmp_path / "run"
    env = judge_env(sim)
    assert invoke("init", run, "--config", config).exit_code == 0
    for args in (("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, "--lag", 1),
                 ("evolve", "--run", run, "--step", 0),
                 ("score", EXAMPLES / "math/step-001.jsonl", "--run", run, "--step", 1, "--lag", 1),
                 *((stage, "--run", run, "--step", 1) for stage in stages)):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.stderr
    result = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", env=env)  # env: the embeddings
    assert result.exit_code == 0, result.stderr
    got, expected = outputs(tmp_path / "replayed"), outputs(run)
    assert "steps/000001/analyses.jsonl" in expected
    assert ("steps/000001/summary.json" in expected) == ("summarize" in stages)
    assert sorted(set(expected) - set(got)) == []
    assert got == expected
