"""Every malformed input in tests/bad_inputs/ is answered with the file, the line and the reason,
a non-zero exit, and a run directory left exactly as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env, snapshot

CORPUS = Path(__file__).parent / "bad_inputs"
CASES = json.loads((CORPUS / "cases.json").read_text())


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with one scored step, so 'unchanged' is checked against real content."""
    from amaris_cli.simjudge.server import SimJudge

    tmp = tmp_path_factory.mktemp("bad")
    config = tmp / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    with SimJudge() as judge:
        assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(judge)).exit_code == 0
    return run


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_bad_input_is_reported_and_changes_nothing(case: dict, scored_run: Path, tmp_path: Path) -> None:
    path = CORPUS / case["file"]
    before = snapshot(scored_run)
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}  # never reached: input is checked first
    if case["command"] == "score":
        result = invoke("score", path, "--run", scored_run, "--step", "7", *case["args"], env=env)
    elif case["command"] == "loop":
        result = invoke("loop", path, "--run", scored_run, env=env)
    elif case["command"] == "init-config":
        result = invoke("init", tmp_path / "new", "--config", path)
    else:
        config = tmp_path / "c.toml"
        config.write_text(TEST_CONFIG)
        result = invoke("init", tmp_path / "new", "--config", config, "--per-instance", "--instance-rubrics", path)
    assert result.exit_code == 2, result.stderr
    message = " ".join(result.stderr.split())
    where = f"{path}:{case['line']}:" if case["line"] else str(path)
    if case["command"] == "score" and case["args"] and case["line"] is None:
        where = "--map"  # a bad flag names the flag
    assert where in message, message
    assert case["reason"] in message, message
    assert snapshot(scored_run) == before
    assert not (tmp_path / "new").exists()


def test_a_huge_line_is_refused_without_reading_it_as_json(scored_run: Path, tmp_path: Path) -> None:
    from amaris_cli.errors import InputErrors
    from amaris_cli.rollouts import read_rollouts

    path = tmp_path / "huge.jsonl"
    huge = '{"id": "b", "input": "p", "output": "' + "x" * 2000 + '"}'
    path.write_text('{"id": "a", "input": "p", "output": "o"}\n' + huge + "\n")
    with pytest.raises(InputErrors, match=rf"huge.jsonl:2: line is {len(huge)} bytes, over the 1000-byte limit"):
        read_rollouts(path, max_line_bytes=1000)


def test_brackets_in_messages_are_printed_literally(tmp_path: Path) -> None:
    result = invoke("init", tmp_path / "new", "--config", CORPUS / "config_no_anchors.toml")
    assert "[[rubric.anchors]]" in result.stderr  # not swallowed as console markup
