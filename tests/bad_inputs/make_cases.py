"""Write the malformed-input corpus and cases.json (run from anywhere; rewrites this folder's files).

Each case names the command it is fed to, the line the error must name (or null), and a piece
of the reason the error must give. test_bad_inputs.py runs every case and checks the exit code,
the message, and that the run directory is unchanged.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

HERE = Path(__file__).parent
OK = '{"id": "ok1", "input": "What is 2+2?", "output": "Final answer: 4", "answer": "4"}'
CASES: list[dict] = []


def case(name: str, data: bytes | str, command: str, line: int | None, reason: str, args: list[str] | None = None) -> None:
    path = HERE / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    CASES.append({"file": name, "command": command, "line": line, "reason": reason, "args": args or []})


def directory(name: str, files: dict[str, str], command: str, reason: str) -> None:
    """A loop directory; a file name with a '/' makes a subdirectory (git keeps no empty one)."""
    path = HERE / name
    path.mkdir()
    for file, text in files.items():
        (path / file).parent.mkdir(parents=True, exist_ok=True)
        (path / file).write_text(text)
    CASES.append({"file": name, "command": command, "line": None, "reason": reason, "args": []})


def nested(levels: int, leaf: str = "1") -> str:
    """JSON text of `levels` nested objects: nested(1) == '{"a": 1}'."""
    return '{"a": ' * levels + leaf + "}" * levels


def line(**fields: str) -> str:
    """A rollout line from raw JSON texts per field (so malformed values can be written as is)."""
    base = {"id": '"b"', "input": '"p"', "output": '"o"'}
    base.update(fields)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in base.items()) + "}\n"


def main() -> None:
    for p in HERE.iterdir():
        if p.name not in ("make_cases.py", "__pycache__"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    s = "score"
    case("invalid_json.jsonl", OK + '\n{"id": "a", "input": "p", "output": }\n', s, 2, "invalid JSON")
    case("truncated_line.jsonl", OK + '\n{"id": "b", "input": "p", "outp', s, 2, "invalid JSON")
    case("bom_inside.jsonl", (OK + "\n").encode() + b"\xef\xbb\xbf" + OK.replace("ok1", "ok2").encode() + b"\n", s, 2,
         "invalid JSON: a UTF-8 byte-order mark inside the file")
    case("crlf_torn.jsonl", OK + '\r\n{"id":\r\n', s, 2, "invalid JSON")
    case("non_utf8.jsonl", b'{"id": "a", "input": "caf\xe9", "output": "o"}\n', s, 1, "not valid UTF-8")
    case("nan.jsonl", '{"id": "a", "input": "p", "output": "o", "score": NaN}\n', s, 1, "invalid JSON")
    case("infinity.jsonl", '{"id": "a", "input": "p", "output": "o", "score": Infinity}\n', s, 1, "invalid JSON")
    case("array_line.jsonl", OK + "\n[1, 2]\n", s, 2, "expected a JSON object, got list")
    case("string_line.jsonl", '"just a string"\n', s, 1, "expected a JSON object, got str")
    case("number_line.jsonl", "42\n", s, 1, "expected a JSON object, got int")
    case("null_line.jsonl", "null\n", s, 1, "expected a JSON object, got NoneType")
    case("missing_output.jsonl", '{"id": "a", "input": "p"}\n', s, 1, "missing output")
    case("missing_input.jsonl", '{"id": "a", "output": "o"}\n', s, 1, "missing input")
    case("only_unknown_fields.jsonl", '{"foo": 1, "bar": 2}\n', s, 1, "missing input")
    case("input_number.jsonl", '{"id": "a", "input": 5, "output": "o"}\n', s, 1, "'input' must be a string")
    case("output_object.jsonl", '{"id": "a", "input": "p", "output": {"text": "o"}}\n', s, 1, "'output' must be a string")
    case("output_int_list.jsonl", '{"id": "a", "input": "p", "response": [1, 2]}\n', s, 1, "'response' must be a string")
    case("empty_input_and_output_ok_but_empty_id.jsonl", '{"id": "", "input": "", "output": ""}\n', s, 1, "'id' is empty")
    case("messages_not_list.jsonl", '{"id": "a", "input": "p", "messages": "hello"}\n', s, 1, "'messages' must be a list")
    case("messages_no_assistant.jsonl", '{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n', s, 1, "no assistant turn")
    case("messages_nested_wrong_type.jsonl",
         '{"id": "a", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": {"x": 1}}]}\n',
         s, 1, "message content must be a string")
    case("id_object.jsonl", '{"id": {"a": 1}, "input": "p", "output": "o"}\n', s, 1, "must be a string or an integer")
    case("id_bool.jsonl", '{"id": true, "input": "p", "output": "o"}\n', s, 1, "must be a string or an integer")
    case("duplicate_id.jsonl", OK + "\n" + OK + "\n", s, 2, "duplicate id 'ok1' (first on line 1)")
    case("empty_file.jsonl", "", s, None, "empty file")
    case("blank_lines_only.jsonl", "\n  \n\n", s, None, "empty file")
    case("step_string.jsonl", '{"id": "a", "input": "p", "output": "o", "step": "two"}\n', s, 1, "must be an integer")
    case("step_fraction.jsonl", '{"id": "a", "input": "p", "output": "o", "step": 1.5}\n', s, 1, "must be an integer")
    case("step_negative.jsonl", '{"id": "a", "input": "p", "output": "o", "step": -1}\n', s, 1,
         "must be an integer from 0 to 1000000000, got -1")
    case("reference_bool.jsonl", '{"id": "a", "input": "p", "output": "o", "answer": true}\n', s, 1, "must be a string, number, list or object")
    case("metadata_list.jsonl", '{"id": "a", "input": "p", "output": "o", "metadata": [1]}\n', s, 1, "'metadata' must be an object")
    case("map_source_missing.jsonl", '{"id": "a", "input": "p", "resp": {"txt": "o"}}\n', s, 1,
         "--map output=resp.text: path not found: resp has no key 'text'", ["--map", "output=resp.text"])
    case("map_bad_syntax.jsonl", OK + "\n", s, None, "expected FIELD=SOURCE", ["--map", "output"])
    case("map_unknown_field.jsonl", OK + "\n", s, None, "unknown field 'answerz'", ["--map", "answerz=x"])

    lp = "loop"
    case("loop_no_step_field.jsonl", OK + "\n", lp, 1, "has no step field")
    case("loop_step_not_integer.jsonl", '{"id": "a", "input": "p", "output": "o", "step": [1]}\n', lp, 1, "must be an integer")
    case("loop_steps_out_of_order.jsonl", '{"id": "a", "input": "p", "output": "o", "step": 3}\n'
         '{"id": "b", "input": "p", "output": "o", "step": 1}\n', lp, 2, "step 1 comes after step 3")
    directory("loop_dir_no_step_files", {"README.txt": "no rollouts here\n"}, lp, "no step files")
    directory("loop_dir_unnumbered", {"final.jsonl": OK + "\n"}, lp, "final.jsonl: the name is not a step-file name")
    directory("loop_dir_duplicate_steps", {"1.jsonl": OK + "\n", "step-001.jsonl": OK + "\n"}, lp, "step 1 also comes from")
    directory("loop_dir_bad_line", {"0.jsonl": OK + "\n", "1.jsonl": OK + "\n{oops\n"}, lp, "1.jsonl:2: invalid JSON")

    # --- hostile inputs (issue 14): each would otherwise crash after the run was touched, be
    # read as something else, or be silently dropped.
    ok = OK + "\n"
    # nesting: a line may nest 64 levels (its own object is level 1); orjson reads 1024, writes 254
    case("deep_metadata_65_levels.jsonl", ok + line(metadata=nested(64)), s, 2, "field 'metadata' nests deeper than 64 levels")
    case("deep_answer_300_levels.jsonl", ok + line(answer="[" * 299 + "]" * 299), s, 2, "field 'answer' nests deeper than 64 levels")
    case("deep_1025_levels.jsonl", ok + line(metadata="[" * 1024 + "]" * 1024), s, 2, "JSON nests deeper than 64 levels")
    case("deep_in_messages.jsonl", ok + '{"id": "b", "messages": [{"role": "user", "content": "q"}, '
         '{"role": "assistant", "content": "a", "extra": ' + nested(70) + "}]}\n", s, 2, "field 'messages' nests deeper")
    # numbers: steps are integers 0..10^9; integers must fit 64 bits (orjson turns larger ones into floats)
    case("step_1e300.jsonl", line(step="1e300"), s, 1, "'step' must be an integer from 0 to 1000000000, got 1e+300")
    case("step_over_max.jsonl", line(step="1000000001"), s, 1, "must be an integer from 0 to 1000000000, got 1000000001")
    case("step_huge_int.jsonl", line(step="123456789012345678901234567890"), s, 1,
         "integer 123456789012345678901234567890 does not fit 64 bits")
    case("step_number_as_string.jsonl", line(step='"1e300"'), s, 1, "'step' must be an integer, got '1e300'")
    case("step_bool.jsonl", line(step="true"), s, 1, "'step' must be an integer, got True")
    case("global_step_fraction.jsonl", line(global_step="2.5"), s, 1, "'global_step' must be an integer, got 2.5")
    case("id_beyond_64_bits.jsonl", ok + line(id="18446744073709551616"), s, 2, "integer 18446744073709551616 does not fit 64 bits")
    case("metadata_int_below_64_bits.jsonl", line(metadata='{"seed": -9223372036854775809}'), s, 1,
         "integer -9223372036854775809 does not fit 64 bits")
    case("metadata_300_digit_int.jsonl", line(metadata='{"n": 1' + "0" * 299 + "}"), s, 1, "(300 digits) does not fit 64 bits")
    case("float_overflow.jsonl", line(score="1e400"), s, 1, "number is infinity")
    # duplicate keys: JSON parsers keep the last one silently
    case("duplicate_key_id.jsonl", ok + '{"id": "x", "id": "y", "input": "p", "output": "o"}\n', s, 2, "duplicate key 'id'")
    case("duplicate_key_nested.jsonl", line(metadata='{"k": 1, "j": {"k": 2}, "k": 3}'), s, 1, "duplicate key 'k'")
    case("duplicate_key_escaped.jsonl", '{"id": "x", "\\u0069d": "y", "input": "p", "output": "o"}\n', s, 1, "duplicate key 'id'")
    case("duplicate_key_masked_by_escaped_colon.jsonl",
         '{"output": "x", "id": "a", "input": "\\u003a", "output": "o"}\n', s, 1, "duplicate key 'output'")
    case("duplicate_id_int_and_string.jsonl", line(id="1") + line(id='"1"'), s, 2, "duplicate id '1' (first on line 1)")
    # --map: the path given must exist on every line; no silent fallback to the aliases or the chat
    case("map_no_fallback_to_messages.jsonl",
         '{"id": "a", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n', s, 1,
         "--map output=resp.text: path not found: the line has no key 'resp'", ["--map", "output=resp.text"])
    case("map_id_missing_on_one_line.jsonl", '{"meta": {"idx": 1}, "input": "p", "output": "o"}\n'
         '{"meta": {"index": 2}, "input": "p", "output": "o"}\n', s, 2,
         "--map id=meta.idx: path not found: meta has no key 'idx'", ["--map", "id=meta.idx"])
    case("map_through_a_string.jsonl", '{"extra_info": "x", "input": "p", "output": "o"}\n', s, 1,
         "extra_info is str, not an object or list, so it has no 'index'", ["--map", "id=extra_info.index"])
    case("map_index_out_of_range.jsonl",
         '{"id": "a", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n', s, 1,
         "messages has no index 5 (it holds 2 item(s))", ["--map", "output=messages.5.content"])
    case("map_step_missing.jsonl", '{"id": "a", "input": "p", "output": "o", "step": 1}\n', s, 1,
         "--map step=meta.step: path not found", ["--map", "step=meta.step"])
    # encodings and line ends
    case("cr_only_line_ends.jsonl", OK + "\r" + OK.replace("ok1", "ok2") + "\r", s, 1,
         "carriage return (\\r) that does not end it")
    case("lone_high_surrogate.jsonl", ok + line(output='"\\ud800"'), s, 2, "surrogate")
    case("lone_low_surrogate.jsonl", ok + line(output='"x\\udc00y"'), s, 2, "surrogate")
    case("nul_bytes_line.jsonl", (ok + "\x00\x00\x00\n").encode(), s, 2, "NUL bytes")
    case("nbsp_only_line.jsonl", ok + "\u00a0\n", s, 2, "invalid JSON")
    case("raw_control_char.jsonl", ok + line(output='"a\x1bb"'), s, 2, "control character")
    case("utf16_file.jsonl", ok.encode("utf-16"), s, None, "file is UTF-16")
    case("gzip_file.jsonl", gzip.compress(ok.encode(), mtime=0), s, None, "gzip-compressed")
    case("bom_only.jsonl", b"\xef\xbb\xbf\n", s, None, "empty file")
    case("trailing_garbage.jsonl", ok + OK + " x\n", s, 2, "invalid JSON: unexpected content after document")
    case("two_objects_one_line.jsonl", OK + OK.replace("ok1", "ok2") + "\n", s, 1, "invalid JSON")
    # under loop the same checks run before run.json, calls.jsonl or memory/ are touched
    case("loop_step_1e300.jsonl", line(step="0") + line(id='"c"', step="1e300"), lp, 2, "got 1e+300")
    case("loop_deep_metadata.jsonl", line(step="0", metadata=nested(300)), lp, 1, "field 'metadata' nests deeper than 64")
    case("loop_duplicate_step_key.jsonl", '{"id": "a", "input": "p", "output": "o", "step": 0, "step": 5}\n', lp, 1,
         "duplicate key 'step'")
    directory("loop_dir_wrong_case_suffix", {"0.jsonl": ok, "6.JSONL": ok}, lp, "6.JSONL: step files end in lowercase '.jsonl'")
    directory("loop_dir_two_numbers", {"0.jsonl": ok, "step-001-v2.jsonl": ok}, lp,
              "step-001-v2.jsonl: the name holds 2 numbers, so its step is ambiguous")
    directory("loop_dir_subdirectory_named_like_a_step", {"0.jsonl": ok, "6.jsonl/keep.txt": "x\n"}, lp,
              "6.jsonl: is a directory, not a regular file")
    directory("loop_dir_step_over_max", {"0.jsonl": ok, "99999999999.jsonl": ok}, lp,
              "99999999999.jsonl: step 99999999999 in the name is over 1000000000")
    directory("loop_dir_json_not_jsonl", {"0.jsonl": ok, "1.json": ok}, lp, "1.json: not a step file (regular file)")
    directory("loop_dir_other_prefix", {"0.jsonl": ok, "rollouts-3.jsonl": ok}, lp, "rollouts-3.jsonl: the name is not a step-file name")
    directory("loop_dir_stray_subdirectory", {"0.jsonl": ok, "checkpoints/model.bin": "x"}, lp,
              "checkpoints: not a step file (directory)")
    directory("loop_dir_compressed_step", {"0.jsonl": ok, "1.jsonl.gz": "x"}, lp, "1.jsonl.gz: not a step file")

    c = "init-config"
    anchor = '[[rubric.anchors]]\nid = "a"\ntext = "correct"\nweight = 1.0\n'
    case("config_unknown_key.toml", anchor + "[memory]\nstatic_stepz = 3\n", c, None, "memory.static_stepz: unknown key")
    case("config_unknown_section.toml", anchor + "[telemetry]\non = true\n", c, None, "telemetry: unknown key")
    case("config_unknown_agent.toml", anchor + '[agents.grader]\nmodel = "x"\n', c, None, "unknown agent(s) grader")
    case("config_bad_value.toml", anchor + '[agents.scorer]\ntemperature = "hot"\n', c, None, "agents.scorer.temperature")
    case("config_bad_response_format.toml", anchor + '[agents.default]\nresponse_format = "yaml"\n', c, None, "response_format")
    case("config_bad_toml.toml", "[rubric\n", c, None, "invalid TOML")
    case("config_not_utf8.toml", b'[training]\ngoal = "caf\xe9"\n', c, None, "not UTF-8")
    case("config_negative_weight.toml", '[[rubric.anchors]]\nid = "a"\ntext = "x"\nweight = -1\n', c, None, "rubric.anchors.0.weight")
    case("config_duplicate_criterion_ids.toml", anchor + anchor, c, None, "duplicate criterion ids: a")
    case("config_no_anchors.toml", "[training]\ngoal = \"x\"\n", c, None, "no anchor criteria")
    case("config_min_above_max.toml", anchor + "[rubric]\nmin_weight = 3\nmax_weight = 1\n", c, None, "min_weight must not exceed max_weight")
    case("config_bad_criterion_id.toml", '[[rubric.anchors]]\nid = "has space"\ntext = "x"\nweight = 1\n', c, None, "rubric.anchors.0.id")
    case("config_only_pitfalls.toml", '[[rubric.anchors]]\nid = "p"\ntext = "x"\nweight = 1\nkind = "pitfall"\n', c, None,
         "at least one criterion of kind 'reward'")

    i = "init-instances"
    case("instances_duplicate_id.jsonl", '{"instance_id": "a"}\n{"instance_id": "a"}\n', i, 2, "duplicate instance_id 'a'")
    case("instances_negative_weight.jsonl", '{"instance_id": "a", "adaptive": [{"id": "x", "text": "t", "weight": -2}]}\n',
         i, 1, "adaptive.0.weight")
    case("instances_duplicate_criteria.jsonl",
         '{"instance_id": "a", "adaptive": [{"id": "x", "text": "t", "weight": 1}, {"id": "x", "text": "u", "weight": 1}]}\n',
         i, 1, "duplicate criterion ids: x")
    case("instances_not_object.jsonl", "[1]\n", i, 1, "expected an object")
    (HERE / "cases.json").write_text(json.dumps(CASES, indent=1) + "\n")
    print(f"{len(CASES)} cases")


if __name__ == "__main__":
    main()
