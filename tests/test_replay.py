"""`replay` reproduces a recorded run exactly and cheaply; ablations re-call only what changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env, outputs


def calls(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimJudge]:
    tmp = tmp_path_factory.mktemp("replay")
    judge = SimJudge(SimJudgeConfig()).start_in_thread()
    config = tmp / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp / "src"
    assert invoke("init", run, "--config", config).exit_code == 0
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:3", "--rescore", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    yield run, judge
    judge.stop()


def test_unchanged_replay_is_byte_identical_and_calls_no_model(recorded, tmp_path) -> None:
    src, judge = recorded
    before = judge.stats["requests"]
    result = invoke("replay", src, "--out", tmp_path / "dst", "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert judge.stats["requests"] == before, "no request may reach the judge server"
    out = json.loads(result.stdout)
    assert out["calls_made"] == 0 and out["calls_reused"] == len(calls(src))
    assert outputs(tmp_path / "dst") == outputs(src)
    assert {c["source"] for c in calls(tmp_path / "dst")} == {"replay"}


def test_dynamic_off_replay_is_identical_until_the_first_update_and_counts_are_exact(recorded, tmp_path) -> None:
    src, judge = recorded
    before = judge.stats["requests"]
    result = invoke("replay", src, "--out", tmp_path / "nodyn", "--no-dynamic", "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    dst = tmp_path / "nodyn"
    same, changed = outputs(src), outputs(dst)
    for name in ("rollouts.jsonl", "scores.jsonl", "analyses.jsonl", "summary.json", "stats.json"):
        assert changed[f"steps/000000/{name}"] == same[f"steps/000000/{name}"]
    assert changed["steps/000000/retrieval.json"] != same["steps/000000/retrieval.json"]
    # Expected: no query generation, and a new updater request wherever the record's updater saw dynamic hits.
    src_calls = calls(src)
    with_hits = [c for c in src_calls if c["agent"] == "updater" and "(none)" not in c["messages"][1]["content"].split("Dynamic memory")[1]]
    queries = [c for c in src_calls if c["agent"] == "query_generator"]
    out = json.loads(result.stdout)
    assert out["calls_made"] == len(with_hits) > 0
    assert out["calls_reused"] == len(src_calls) - len(queries) - len(with_hits)
    assert judge.stats["requests"] - before == len(with_hits)


def test_offline_miss_is_a_clear_error_and_writes_nothing(recorded, tmp_path) -> None:
    src, judge = recorded
    before = judge.stats["requests"]
    result = invoke("replay", src, "--out", tmp_path / "off", "--offline", "--no-dynamic", env=judge_env(judge))
    assert result.exit_code == 5
    assert "--offline: step 1, agent updater" in result.stderr
    assert "differs from character" in result.stderr
    assert judge.stats["requests"] == before
    assert not (tmp_path / "off").exists()


def test_replay_into_another_run_is_refused(recorded, tmp_path) -> None:
    src, judge = recorded
    result = invoke("replay", src, "--out", src, env=judge_env(judge))
    assert result.exit_code == 1 and "not a replay of" in result.stderr


def test_compare_puts_runs_side_by_side(recorded, tmp_path) -> None:
    src, judge = recorded
    invoke("replay", src, "--out", tmp_path / "again", env=judge_env(judge))
    result = invoke("compare", src, tmp_path / "again", "--json")
    assert result.exit_code == 0, result.stderr
    a, b = json.loads(result.stdout)["runs"]
    assert a["mean_reward"] == b["mean_reward"] and len(a["mean_reward"]) == 4
    assert (a["calls_made"], a["calls_reused"]) == (len(calls(src)), 0)
    assert (b["calls_made"], b["calls_reused"]) == (0, len(calls(src)))
    assert a["strategies"] and a["final_rubric_size"] >= 3
