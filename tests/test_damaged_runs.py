"""A run directory damaged by hand: files edited into something amaris never writes, stray entries beside its own.

Every reader and writer names the damaged file (and the line or the field) with the reason in one line, never a
traceback; a stray entry is not taken for a step or a rubric version; a derived file amaris can make again is made
again by the next run of the stage that wrote it, byte for byte as it was.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import (
    EXAMPLES,
    FAST_MEMORY,
    invoke,
    judge_env,
    new_run,
    outputs,
    read_only_copy,
    snapshot,
)

LOOP = ("loop", EXAMPLES / "math", "--steps", "0:2")


@pytest.fixture(scope="module")
def recorded(judge, tmp_path_factory) -> Path:
    """A 3-step run with updates (rubric versions 0-3), made once for the module."""
    run = new_run(tmp_path_factory.mktemp("damaged"), extra=FAST_MEMORY)
    result = invoke(*LOOP, "--run", run, env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    return run


@pytest.fixture
def copy(recorded, tmp_path) -> Path:
    return Path(shutil.copytree(recorded, tmp_path / "run", symlinks=True))


def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    value = json.loads(path.read_bytes())
    change(value)
    path.write_text(json.dumps(value, indent=2))


def one_error_line(result) -> str:
    assert result.exit_code != 0 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert "pydantic" not in result.stderr and "validation error for" not in result.stderr, result.stderr
    return lines[0]


DAMAGES = {
    # (file, change, what the one line says besides the file)
    "summary-missing-field": ("steps/000001/summary.json", lambda v: v.pop("chunks"), "chunks: Field required"),
    "update-unknown-strategy": ("steps/000001/update.json", lambda v: v.update(strategy=5), "strategy: Input should be"),
    "retrieval-emptied": ("steps/000001/retrieval.json", lambda v: v.clear(), "step: Field required"),
    "provenance-unknown-key": ("steps/000001/provenance.json", lambda v: v.update(note="mine"), "note: Extra inputs"),
    "rubric-duplicate-id": ("rubrics/step-000001.json", lambda v: v["adaptive"].append(dict(v["anchors"][0])),
                            "duplicate criterion ids: correct-answer"),
    "rubric-negative-weight": ("rubrics/step-000001.json", lambda v: v["adaptive"][0].update(weight=-1.0),
                               "adaptive.0.weight: Input should be greater than 0"),
    "manifest-unknown-config-key": ("run.json", lambda v: v["config"]["pipeline"].update(new_knob=1),
                                    "pipeline.new_knob: unknown key"),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_hand_edited_json_file_is_one_line_naming_the_file_and_the_field(copy, tmp_path, damage) -> None:
    name, change, reason = DAMAGES[damage]
    edit_json(copy / name, change)
    for args in (("inspect", copy, "--step", "1"), ("report", copy, "--out", tmp_path / "r.html")):
        line = one_error_line(invoke(*args))
        assert f"{copy / name}" in line and reason in line, (args[0], line)


@pytest.mark.parametrize("damage, reason", [
    (lambda b: b[:300] + b"\xff" + b[300:], ":1: corrupt line (not valid UTF-8 (byte 300: b'\\xff'))"),
    (lambda b: b.decode().encode("utf-16"), ":1: corrupt line (file is UTF-16"),
    (lambda b: b"\xef\xbb\xbf" + b, ":1: corrupt line (the file starts with a UTF-8 byte-order mark"),
    (lambda b: b.replace(b"\n", b"X", 1), ":1: corrupt line (invalid JSON: unexpected content after document (column "),
], ids=["invalid-utf8-mid-line", "utf16", "bom", "two-lines-joined"])
def test_a_damaged_jsonl_line_says_what_is_wrong_with_it(copy, damage, reason) -> None:
    path = copy / "steps/000001/scores.jsonl"
    path.write_bytes(damage(path.read_bytes()))
    line = one_error_line(invoke("inspect", copy))
    assert f"{path}{reason}" in line, line
    assert "surrogates" not in line and "line 1 column" not in line, line


@pytest.mark.parametrize("name, args", [
    ("rollouts.jsonl", ("inspect", "{run}", "--step", "1")),
    ("scores.jsonl", ("inspect", "{run}")),
    ("analyses.jsonl", ("memory", "rebuild", "--run", "{run}")),
], ids=["rollouts-inspect", "scores-inspect", "analyses-memory"])
def test_a_rollouts_record_twice_in_a_step_file_names_both_lines(judge, copy, name, args) -> None:
    """A step file that holds a rollout's record twice (a hand edit, two files joined): `inspect` counted 17
    rollouts of 16 and their mean with one of them twice, and the memory failed as a whole with chromadb's
    DuplicateIDError, its advice being to free disk space. (`rewards` already refuses a scores.jsonl that is not
    the one its step wrote.)"""
    path = copy / "steps/000001" / name
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines) + lines[2])
    line = one_error_line(invoke(*[a.format(run=copy) for a in args], env=judge_env(judge)))
    rollout = json.loads(lines[2]).get("rollout_id") or json.loads(lines[2])["id"]
    assert (f"{path}:{len(lines) + 1}: a second record of rollout {rollout!r} (the first is on line 3)" in line), line


@pytest.mark.parametrize("damage", ["manifest-utf16", "manifest-bom", "rubric-nan"])
def test_a_json_file_that_no_longer_parses_names_its_line(copy, damage) -> None:
    if damage == "rubric-nan":
        path = copy / "rubrics/step-000001.json"
        text = path.read_bytes()
        path.write_bytes(text.replace(b'"weight": 1.0', b'"weight": NaN', 1))
        line = text[:text.index(b'"weight": 1.0')].count(b"\n") + 1
        expected = f"{path}:{line}: not a valid rubric file: invalid JSON"
    else:
        path = copy / "run.json"
        path.write_bytes(path.read_bytes().decode().encode("utf-16") if damage == "manifest-utf16"
                         else b"\xef\xbb\xbf" + path.read_bytes())
        expected = f"{path}:1: not a readable manifest: "
    line = one_error_line(invoke("inspect", copy, "--step", "1"))
    assert expected in line and "surrogates" not in line, line


def test_stray_entries_are_not_taken_for_steps_or_rubric_versions(judge, recorded, copy) -> None:
    before = outputs(copy)
    (copy / "steps/1").mkdir()  # a user's scratch directory, a copy, a non-ASCII digit
    (copy / "steps/00000²").mkdir()
    (copy / "steps/٢").mkdir()
    shutil.copyfile(copy / "rubrics/step-000003.json", copy / "rubrics/step-7.json")
    result = invoke("inspect", copy, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [s["step"] for s in data["steps"]] == [0, 1, 2] and data["rubric_versions"] == [0, 1, 2, 3]
    assert invoke("report", copy, "--out", copy / "r.html").exit_code == 0
    assert invoke("compare", recorded, copy).exit_code == 0
    result = invoke(*LOOP, "--run", copy, env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    after = outputs(copy)
    assert {k: v for k, v in after.items() if k in before} == before
    (copy / "rubrics/instances/x").mkdir(parents=True)  # an explicit version is looked up among instances' too
    shutil.copyfile(copy / "rubrics/step-000001.json", copy / "rubrics/instances/x/step-².json")
    result = invoke("score", EXAMPLES / "math/step-003.jsonl", "--run", copy, "--step", 3, "--rubric-version", 3,
                    env=judge_env(judge))
    assert result.exit_code == 0, result.stderr


def test_a_rubric_or_retrieval_damaged_by_hand_is_written_again_by_the_next_loop(judge, copy) -> None:
    before = outputs(copy)
    edit_json(copy / "rubrics/step-000002.json", lambda v: v["adaptive"][0].update(weight=-1.0))
    (copy / "steps/000000/retrieval.json").write_text("{}")
    result = invoke(*LOOP, "--run", copy, env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert outputs(copy) == before
    # the rubric's edit undone, and said: it was lost without a word
    said = " ".join(result.stderr.split())
    assert f"{copy / 'rubrics/step-000002.json'}: rubric version 2 was edited since written; written again from" in said


def test_every_reader_marks_a_step_whose_scores_were_edited(copy, recorded, tmp_path) -> None:
    """One reward of step 1 edited by hand (still valid JSON): `inspect` called the step stale, but `compare` showed
    its mean as comparable, the report as any other, and `rewards` said the step had no complete scores."""
    path = copy / "steps/000001/scores.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["reward"] = 1.0 if rows[0]["reward"] != 1.0 else 0.0
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    compared = invoke("compare", copy, recorded, "--json")
    assert compared.exit_code == 0, compared.stderr
    table = json.loads(compared.stdout)
    assert table["comparable"] == {"0": True, "1": False, "2": True}, table["comparable"]
    assert [run["stale"] for run in table["runs"]] == [{"1": ["scores.jsonl"]}, {}]
    shown = " ".join(invoke("compare", copy, recorded).stderr.split())
    assert "1 0.563 stale 0.552 no: stale" in shown, shown
    line = one_error_line(invoke("rewards", "--run", copy, "--step", "1"))
    assert "scores.jsonl is not as amaris wrote it (edited by hand, or cut by a crash)" in line, line
    from amaris_cli.report.collect import collect
    from amaris_cli.rundir import RunDir

    overview, _ = collect(RunDir(copy))
    # (inspect's list: the edited file and those made from it)
    assert [s.stale[:2] for s in overview.steps] == [[], ["analyses.jsonl", "scores.jsonl"], []]


def test_a_report_into_a_read_only_run_names_the_report_not_a_temporary_file(recorded, tmp_path) -> None:
    with read_only_copy(recorded, tmp_path / "ro") as copy:
        before = snapshot(copy)
        line = one_error_line(invoke("report", copy))
        assert line == f"error: {copy / 'report.html'}: Read-only file system", line
        assert snapshot(copy) == before


def test_a_step_file_read_again_unchanged_is_not_validated_again_and_a_changed_one_is(tmp_path, monkeypatch) -> None:
    """An evolution read the step's scores four times and its analyses three, validating every record each time.
    A process now shares the records of a file whose bytes did not change (records nobody can change), and
    reads a file again as soon as one byte differs, the size unchanged."""
    from pydantic import ValidationError

    from amaris_cli import jsonio
    from amaris_cli.artifacts import load_scores
    from amaris_cli.models import ScoreRecord
    from amaris_cli.rundir import RunDir

    run = RunDir(tmp_path / "run")
    path = run.step_dir(0) / "scores.jsonl"
    path.parent.mkdir(parents=True)
    rows = [{"rollout_id": f"r{i}", "step": 0, "rubric_version": 0, "status": "scored", "reward": 0.5} for i in range(50)]
    path.write_bytes(b"".join(jsonio.dumps_line(r) for r in rows))
    validated: list[int] = []
    validate = jsonio._validated
    monkeypatch.setattr(jsonio, "_validated", lambda *a: (validated.append(a[1]), validate(*a))[1])
    first, second = load_scores(run, 0), load_scores(run, 0)
    assert len(validated) == 50 and second == first and second is not first
    with pytest.raises(ValidationError):
        second[0].reward = 1.0  # type: ignore[misc]
    path.write_bytes(path.read_bytes().replace(b'"reward":0.5', b'"reward":0.7', 1))
    changed = load_scores(run, 0)
    assert len(validated) == 100 and changed[0].reward == 0.7 and changed[1:] == first[1:]
    assert isinstance(changed[0], ScoreRecord)
