"""`inspect` shows what a run holds, with tokens turned into cost when prices are configured."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env


def test_inspect_reports_steps_updates_hacking_memory_and_cost(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + '\n[prices.judge-model]\nprompt = 1.0\ncompletion = 4.0\n')
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    data = json.loads(invoke("inspect", run, "--json").stdout)
    assert [s["step"] for s in data["steps"]] == [0, 1, 2]
    assert all(s["rollouts"] == 16 and sum(s["reward_histogram"]) == 16 for s in data["steps"])
    assert {s["strategy"] for s in data["steps"]} <= {"MAINTENANCE", "CORRECTIVE", "ADVANCEMENT"}
    assert any(h["pattern"] == "grader_addressed_instructions" for s in data["steps"] for h in s["hacking"])
    assert data["memory_entries"] == {"analysis": 48, "summary": 3, "update": 3}
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    prompt = sum(c["usage"]["prompt_tokens"] for c in calls)
    completion = sum(c["usage"]["completion_tokens"] for c in calls)
    assert data["totals"]["prompt_tokens"] == prompt
    assert abs(data["totals"]["cost"] - (prompt * 1.0 + completion * 4.0) / 1e6) < 1e-6
    detail = json.loads(invoke("inspect", run, "--step", "1", "--json").stdout)["detail"]
    assert detail["criteria"] and detail["rubric"][0]["anchor"] is True and detail["retrieval"]["static"]
    assert set(detail["usage"]) >= {"scorer", "analyzer", "updater"}
    shown = invoke("inspect", run, "--step", "1")
    assert shown.exit_code == 0 and "tokens and cost by agent" in shown.stderr and "criteria" in shown.stderr
