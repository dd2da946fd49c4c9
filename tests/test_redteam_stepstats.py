"""Red-team tests of inspect's criterion statistics computed from a step's files (stepstats.py): a run file
edited by hand into a record amaris cannot read is an error naming the file and line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env


@pytest.fixture
def scored_run(tmp_path: Path, sim) -> Path:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    result = invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    return run


@pytest.mark.parametrize(("name", "edit"), [
    ("rollouts.jsonl", {"input": 5}),
    ("rollouts.jsonl", {"surprise": 1}),
    ("scores.jsonl", {"reward": "high"}),
    ("scores.jsonl", {"status": "great"}),
])
def test_a_hand_edited_record_is_an_error_naming_file_and_line(scored_run: Path, name: str, edit: dict) -> None:
    path = scored_run / "steps/000000" / name
    lines = path.read_text().splitlines()
    lines[3] = json.dumps({**json.loads(lines[3]), **edit})
    path.write_text("\n".join(lines) + "\n")
    result = invoke("inspect", scored_run, "--step", "0")
    assert result.exit_code != 0
    assert "Traceback" not in result.stdout + result.stderr
    message = " ".join(result.stderr.split())
    assert f"{path}:4:" in message, message
    assert next(iter(edit)) in message, message
