"""Reading rollouts in the shapes trainers write, and reporting every bad line."""

from __future__ import annotations

from pathlib import Path

import pytest

from amaris_cli.errors import InputError, InputErrors
from amaris_cli.rollouts import discover_steps, parse_mapping, read_rollouts
from tests.conftest import write_jsonl


def test_canonical_shape_is_read_as_is(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "input": "2+2?", "output": "4", "supplemental_context": "4"}])
    [r] = read_rollouts(path)
    assert (r.id, r.input, r.output, r.supplemental_context) == ("a", "2+2?", "4", "4")


def test_trainer_field_names_map_to_canonical(tmp_path: Path) -> None:
    rows = [
        {"prompt": "p1", "response": "o1", "ground_truth": "g1"},
        {"query": "p2", "completion": "o2", "answer": "g2"},  # TRL/verifiers: answer is the reference
        {"input": "p3", "output": "o3", "gts": 7, "step": 3},  # verl rollout dump
        {"question": "p4", "solution_str": "o4", "reward_model": {"ground_truth": "g4"}},
    ]
    read = read_rollouts(write_jsonl(tmp_path / "r.jsonl", rows))
    assert [(r.input, r.output, r.supplemental_context) for r in read] == [
        ("p1", "o1", "g1"), ("p2", "o2", "g2"), ("p3", "o3", "7"), ("p4", "o4", "g4")]
    assert read[2].step == 3


def test_chat_messages_last_assistant_turn_is_the_output(tmp_path: Path) -> None:
    rows = [{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+3?"},
                          {"role": "assistant", "content": "5"}], "label": "5"}]
    [r] = read_rollouts(write_jsonl(tmp_path / "r.jsonl", rows))
    assert r.output == "5"
    assert "[user]\n2+3?" in r.input and "[system]" in r.input


def test_trl_conversational_completion_list(tmp_path: Path) -> None:
    rows = [{"prompt": [{"role": "user", "content": "hi"}], "completion": [{"role": "assistant", "content": "hello"}]}]
    [r] = read_rollouts(write_jsonl(tmp_path / "r.jsonl", rows))
    assert (r.input, r.output) == ("[user]\nhi", "hello")


def test_map_option_reads_any_field(tmp_path: Path) -> None:
    rows = [{"q": {"text": "p"}, "a": "o", "meta": {"idx": 12}}]
    mapping = parse_mapping(["input=q.text", "output=a", "id=meta.idx"])
    [r] = read_rollouts(write_jsonl(tmp_path / "r.jsonl", rows), mapping)
    assert (r.id, r.input, r.output) == ("12", "p", "o")


def test_missing_ids_are_stable_content_hashes_and_exact_duplicates_differ(tmp_path: Path) -> None:
    rows = [{"input": "p", "output": "o"}, {"input": "p", "output": "o"}, {"input": "p", "output": "x"}]
    first = read_rollouts(write_jsonl(tmp_path / "a.jsonl", rows))
    again = read_rollouts(write_jsonl(tmp_path / "b.jsonl", rows))
    assert [r.id for r in first] == [r.id for r in again]
    assert len({r.id for r in first}) == 3


def test_every_bad_line_is_reported_with_file_line_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"id": "a", "input": "p", "output": "o"}\n'
        b'{"id": "b", "input": "p", "output": \n'          # 2: invalid JSON
        b'{"id": "c", "input": "p"}\n'                      # 3: no output
        b'{"id": "d", "input": 5, "output": "o"}\n'         # 4: input not a string
        b'{"id": "a", "input": "p", "output": "o"}\n'       # 5: duplicate id
        b'{"id": "f", "input": "p", "output": "\xff\xfe"}\n'  # 6: not UTF-8
        b'[1, 2]\n'                                         # 7: not an object
        b'{"id": "h", "input": "p", "output": "o", "step": "two"}\n'  # 8: step not an integer
        b'{"id": "i", "input": "p", "output": NaN}\n'       # 9: NaN is not JSON
    )
    with pytest.raises(InputErrors) as info:
        read_rollouts(path)
    lines = {e.line: e.reason for e in info.value.errors}
    assert sorted(lines) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert "invalid JSON" in lines[2]
    assert "missing output" in lines[3]
    assert "'input' must be a string" in lines[4]
    assert "duplicate id 'a' (first on line 1)" in lines[5]
    assert "UTF-8" in lines[6]
    assert "JSON object" in lines[7]
    assert "integer" in lines[8]
    assert str(info.value).startswith(f"{path}:2: ")


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(InputError, match="empty file"):
        read_rollouts(path)


def test_bom_and_crlf_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "win.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "input": "p", "output": "o"}\r\n{"id": "b", "input": "p", "output": "o"}\r\n')
    assert [r.id for r in read_rollouts(path)] == ["a", "b"]


def test_step_directory_and_single_file_inputs(tmp_path: Path) -> None:
    d = tmp_path / "steps"
    d.mkdir()
    write_jsonl(d / "3.jsonl", [{"input": "p", "output": "o"}])
    write_jsonl(d / "step-001.jsonl", [{"input": "p", "output": "o"}])
    assert list(discover_steps(d)) == [1, 3]
    one = write_jsonl(tmp_path / "all.jsonl", [{"input": "q", "output": "o", "global_step": 0}, {"input": "p", "output": "o", "step": 2}])
    assert list(discover_steps(one)) == [0, 2]
    backwards = write_jsonl(tmp_path / "back.jsonl", [{"input": "p", "output": "o", "step": 2}, {"input": "q", "output": "o", "step": 1}])
    with pytest.raises(InputErrors, match=r"back.jsonl:2: step 1 comes after step 2 \(line 1\)"):
        discover_steps(backwards)
    no_step = write_jsonl(tmp_path / "nostep.jsonl", [{"input": "p", "output": "o"}])
    with pytest.raises(InputError, match="no step field"):
        discover_steps(no_step)
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    with pytest.raises(InputError, match="no step files"):
        discover_steps(empty_dir)
