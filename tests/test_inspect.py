"""`inspect` shows what a run holds, with tokens turned into cost when prices are configured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
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


def test_inspect_reads_at_80_columns_and_a_missing_step_is_an_error(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    # A real process with COLUMNS=80 and stderr not a terminal, as when a person pipes or a script reads it.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))} | {"COLUMNS": "80"}
    shown = subprocess.run([sys.executable, "-m", "amaris_cli", "inspect", str(run), "--step", "2"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    text = shown.stderr
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text and "..." not in text, "nothing is cut"
    for header in ("step", "rubric", "rollouts", "failed", "mean", "sd", "distribution", "update", "edits", "hacking",
                   "criterion", "kind", "weight", "rate", "spread", "at 1", "at 0", "calls", "tokens in", "tokens out"):
        assert re.search(rf"(^|\s){re.escape(header)}(\s|$)", text, re.M), header
    for explained in ("sd: mean reward and its standard deviation", "failed: rollouts the judge could not score",
                      "rate: mean verdict", "prevalence of a pitfall (higher = worse)", "at 1 / at 0:", "* anchor"):
        assert explained in " ".join(text.split()), explained
    flowing = " ".join(text.split())  # wrapped cells joined: whole criterion texts and pattern names are there
    rubric = json.loads((run / "rubrics" / "step-000002.json").read_text())
    for c in rubric["anchors"] + rubric["adaptive"]:
        assert all(word in flowing for word in c["text"].split()), c["text"]
    assert "grader_addressed_instructions" in text
    update = json.loads((run / "steps" / "000002" / "update.json").read_text())
    assert update["strategy"] in text and " ".join(update["rationale"].split()) in flowing

    missing = invoke("inspect", run, "--step", "9")
    assert missing.exit_code == 2
    assert "step 9 does not exist" in missing.stderr and "steps 0-2" in missing.stderr
    assert "vNone" not in missing.stderr + missing.stdout
    assert invoke("inspect", run, "--step", "9", "--json").exit_code == 2


def test_tokens_count_only_calls_sent_to_a_model(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    source, replayed = tmp_path / "run", tmp_path / "replayed"
    assert invoke("init", source, "--config", config).exit_code == 0
    assert invoke("loop", EXAMPLES / "math", "--run", source, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    result = invoke("replay", source, "--out", replayed, "--offline", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    original = json.loads(invoke("inspect", source, "--json").stdout)["totals"]
    again = json.loads(invoke("inspect", replayed, "--json").stdout)["totals"]
    assert original["model_calls"] > 0 and original["recorded_calls"] == 0 and original["prompt_tokens"] > 0
    assert again["model_calls"] == 0 and again["recorded_calls"] == original["model_calls"]
    assert again["prompt_tokens"] == 0 and again["completion_tokens"] == 0, "a replayed call spent no tokens"
