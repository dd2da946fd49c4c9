"""Every malformed input in tests/bad_inputs/ is answered with the file, the line and the reason,
a non-zero exit, and a run directory left exactly as it was."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, TEST_CONFIG, clean_env, invoke, judge_env, new_run, snapshot

CORPUS = Path(__file__).parent / "bad_inputs"
CASES = json.loads((CORPUS / "cases.json").read_text())


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with one scored step, so 'unchanged' is checked against real content."""
    from amaris_cli.simjudge.server import SimJudge

    run = new_run(tmp_path_factory.mktemp("bad"))
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


def _special_entry(kind: str, directory: Path) -> str:
    """Make one entry the corpus cannot hold in git; returns its name."""
    if kind == "fifo":
        os.mkfifo(directory / "1.jsonl")
        return "1.jsonl: is a FIFO (named pipe), not a regular file"
    if kind == "dangling-symlink":
        os.symlink(directory / "gone.jsonl", directory / "1.jsonl")
        return "1.jsonl: dangling symlink (points to"
    if kind == "symlink-loop":
        os.symlink(directory / "1.jsonl", directory / "1.jsonl")
        return "1.jsonl: symlink loop"
    if kind == "symlink-to-device":
        os.symlink("/dev/zero", directory / "1.jsonl")
        return "1.jsonl: is a character device, not a regular file"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fifo", "dangling-symlink", "symlink-loop", "symlink-to-device"])
def test_a_loop_directory_entry_that_is_not_a_file_is_reported(kind: str, scored_run: Path, tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    steps.mkdir()
    (steps / "0.jsonl").write_text('{"id": "a", "input": "p", "output": "o"}\n')
    reason = _special_entry(kind, steps)
    before = snapshot(scored_run)
    started = time.monotonic()
    result = invoke("loop", steps, "--run", scored_run, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert time.monotonic() - started < 30  # a FIFO is never opened, so nothing waits for a writer
    assert result.exit_code == 2, result.stderr
    assert f"{steps}/{reason}" in " ".join(result.stderr.split())
    assert snapshot(scored_run) == before


@pytest.mark.parametrize("command", ["score", "loop"])
def test_a_fifo_nobody_writes_to_is_refused_in_bounded_time(command: str, scored_run: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from amaris_cli import inputfiles

    monkeypatch.setattr(inputfiles, "FIFO_WRITER_WAIT_S", 0.5)
    fifo = tmp_path / "in.jsonl"
    os.mkfifo(fifo)
    before = snapshot(scored_run)
    started = time.monotonic()
    args = ("--step", "7") if command == "score" else ()
    result = invoke(command, fifo, "--run", scored_run, *args, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert time.monotonic() - started < 30
    assert result.exit_code == 2, result.stderr
    assert f"{fifo}: no process wrote to this pipe within 0.5 s" in " ".join(result.stderr.split())
    assert snapshot(scored_run) == before


def test_dev_zero_is_refused_by_the_cli_without_reading_it(scored_run: Path) -> None:
    """A child process under a 2 GiB address-space cap: a reader that reads /dev/zero to the end
    fails this test instead of exhausting the machine."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    before = snapshot(scored_run)
    env = clean_env()
    child = subprocess.run([sys.executable, "-m", "amaris_cli", "score", "/dev/zero", "--run", str(scored_run), "--step", "7"],
                           capture_output=True, text=True, timeout=120, preexec_fn=cap,
                           env={**env, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert child.returncode == 2, child.stderr[-800:]
    assert "/dev/zero: is a character device, expected a JSONL file or a pipe" in " ".join(child.stderr.split())
    assert "Traceback" not in child.stderr
    assert snapshot(scored_run) == before


def test_a_line_over_the_cli_line_limit_is_refused(scored_run: Path, tmp_path: Path) -> None:
    from amaris_cli.rollouts import MAX_LINE_BYTES

    path = tmp_path / "long.jsonl"
    filler = MAX_LINE_BYTES + 10
    with open(path, "wb") as fh:
        fh.write(b'{"id": "a", "input": "p", "output": "o"}\n{"id": "b", "input": "p", "output": "')
        fh.write(b"x" * filler)
        fh.write(b'"}\n')
    before = snapshot(scored_run)
    result = invoke("score", path, "--run", scored_run, "--step", "7", env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert result.exit_code == 2, result.stderr
    size = len('{"id": "b", "input": "p", "output": "') + filler + 2
    assert f"{path}:2: line is {size} bytes, over the {MAX_LINE_BYTES}-byte limit" in " ".join(result.stderr.split())
    assert snapshot(scored_run) == before


def test_a_pipe_input_records_the_hash_of_what_was_scored(tmp_path: Path) -> None:
    """`amaris score <(jq -c . f.jsonl)`: the pipe is read once; run.json must hold the hash of
    those bytes, not of a second (empty) read."""
    from amaris_cli.simjudge.server import SimJudge

    data = (EXAMPLES / "math" / "step-000.jsonl").read_bytes()
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    read_fd, write_fd = os.pipe()

    def write() -> None:
        with os.fdopen(write_fd, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with SimJudge() as judge:
            result = invoke("score", f"/dev/fd/{read_fd}", "--run", run, "--step", "0", env=judge_env(judge))
    finally:
        writer.join(timeout=10)
        os.close(read_fd)
    assert result.exit_code == 0, result.stderr
    provenance = json.loads((run / "steps" / "000000" / "provenance.json").read_text())
    recorded = provenance["files"]["rollouts.jsonl"]["inputs"]["source"]["sha256"]
    assert recorded == hashlib.sha256(data).hexdigest()


def test_an_error_quotes_a_long_id_or_chat_role_cut_short(scored_run: Path, tmp_path: Path) -> None:
    """A rollout's id and a chat turn's role are the trainer's data, of any length: a duplicated 200,000-character
    id or role was quoted whole, so one bad line printed 200 KB to the terminal and buried the error itself. An id
    longer than MAX_ROLLOUT_ID_CHARS is refused where it is read (it would be quoted in every message, memory entry
    and report that names the rollout); a shorter one is still cut where an error quotes it."""
    from amaris_cli.models import MAX_ROLLOUT_ID_CHARS

    long, longest = "x" * MAX_ROLLOUT_ID_CHARS, "y" * 200_000
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in [
        {"id": long, "input": "p", "output": "o"}, {"id": long, "input": "p", "output": "o"},
        {"id": "c", "messages": [{"role": "assistant", "content": "o"}, {"role": longest, "content": "p"}]},
        {"uid": longest, "input": "p", "output": "o"}]))
    result = invoke("score", path, "--run", scored_run, "--step", "7", env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert result.exit_code == 2 and len(result.stderr) < 2_000, result.stderr[:500]
    said = " ".join(result.stderr.split())
    assert f"{path}:2: duplicate id 'xxxxx" in said and "... (first on line 1)" in said
    assert f"{path}:3: the chat goes on after its last assistant turn (a 'yyyyy" in said
    assert f"{path}:4: field 'uid' has 200000 characters, more than {MAX_ROLLOUT_ID_CHARS} ('yyyyy" in said


def test_a_run_written_before_the_id_limit_is_still_read(tmp_path: Path) -> None:
    """The limit on an id's length is the input's (rollouts.py): a run whose rollouts.jsonl an earlier amaris wrote
    with a longer id was refused by every reader of its rollouts (inspect, report, analyze, replay) as 'not a valid
    Rollout ...; was the file edited by hand?', though nobody edited it."""
    from amaris_cli import artifacts
    from amaris_cli.jsonio import write_jsonl_atomic
    from amaris_cli.models import MAX_ROLLOUT_ID_CHARS
    from amaris_cli.rundir import RunDir

    run = RunDir(tmp_path / "run")
    long = "z" * (MAX_ROLLOUT_ID_CHARS + 100)
    path = artifacts.rollouts_path(run, 0)
    path.parent.mkdir(parents=True)
    write_jsonl_atomic(path, [{"id": long, "input": "p", "output": "o", "step": 0, "metadata": {}}])
    [rollout] = artifacts.load_rollouts(run, 0)
    assert rollout.id == long


def test_a_line_without_a_step_in_a_file_of_many_steps_is_named_by_its_line(scored_run: Path, tmp_path: Path) -> None:
    """One file that holds many steps needs a step on every line. The error named no line, only the rollout by its
    id, and since ids are quoted cut to 60 characters, ids that share a longer prefix (an experiment's name, a
    path) no longer told which line it was; and only the first such line was said."""
    prefix = "experiments/2026-11-25/grpo-qwen-7b-math/global_step_000040/prompt_"
    rows = [{"id": f"{prefix}{i:04d}", "input": "p", "output": "o", **({"step": 0} if i == 0 else {})} for i in range(3)]
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = invoke("loop", path, "--run", scored_run, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert result.exit_code == 2, result.stderr
    said = " ".join(result.stderr.split())
    for line in (2, 3):
        assert f"{path}:{line}: the line has no step field (needed when one file holds many steps)" in said, said
