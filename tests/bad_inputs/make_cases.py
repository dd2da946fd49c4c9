"""Write the malformed-input corpus and cases.json (run from anywhere; rewrites this folder's files).

Each case names the command it is fed to, the line the error must name (or null), and a piece
of the reason the error must give. test_bad_inputs.py runs every case and checks the exit code,
the message, and that the run directory is unchanged.
"""

from __future__ import annotations

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
    path = HERE / name
    path.mkdir()
    for file, text in files.items():
        (path / file).write_text(text)
    CASES.append({"file": name, "command": command, "line": None, "reason": reason, "args": []})


def main() -> None:
    for p in HERE.iterdir():
        if p.name not in ("make_cases.py", "__pycache__"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    s = "score"
    case("invalid_json.jsonl", OK + '\n{"id": "a", "input": "p", "output": }\n', s, 2, "invalid JSON")
    case("truncated_line.jsonl", OK + '\n{"id": "b", "input": "p", "outp', s, 2, "invalid JSON")
    case("bom_inside.jsonl", (OK + "\n").encode() + b"\xef\xbb\xbf" + OK.replace("ok1", "ok2").encode() + b"\n", s, 2, "invalid JSON")
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
    case("step_negative.jsonl", '{"id": "a", "input": "p", "output": "o", "step": -1}\n', s, 1, "must be >= 0")
    case("reference_bool.jsonl", '{"id": "a", "input": "p", "output": "o", "answer": true}\n', s, 1, "must be a string, number, list or object")
    case("metadata_list.jsonl", '{"id": "a", "input": "p", "output": "o", "metadata": [1]}\n', s, 1, "'metadata' must be an object")
    case("map_source_missing.jsonl", '{"id": "a", "input": "p", "resp": {"txt": "o"}}\n', s, 1, "missing output",
         ["--map", "output=resp.text"])
    case("map_bad_syntax.jsonl", OK + "\n", s, None, "expected FIELD=SOURCE", ["--map", "output"])
    case("map_unknown_field.jsonl", OK + "\n", s, None, "unknown field 'answerz'", ["--map", "answerz=x"])

    lp = "loop"
    case("loop_no_step_field.jsonl", OK + "\n", lp, None, "has no step field")
    case("loop_step_not_integer.jsonl", '{"id": "a", "input": "p", "output": "o", "step": [1]}\n', lp, 1, "must be an integer")
    case("loop_steps_out_of_order.jsonl", '{"id": "a", "input": "p", "output": "o", "step": 3}\n'
         '{"id": "b", "input": "p", "output": "o", "step": 1}\n', lp, 2, "step 1 comes after step 3")
    directory("loop_dir_no_step_files", {"README.txt": "no rollouts here\n"}, lp, "no step files")
    directory("loop_dir_unnumbered", {"final.jsonl": OK + "\n"}, lp, "carries no step number")
    directory("loop_dir_duplicate_steps", {"1.jsonl": OK + "\n", "step-001.jsonl": OK + "\n"}, lp, "step 1 also comes from")
    directory("loop_dir_bad_line", {"0.jsonl": OK + "\n", "1.jsonl": OK + "\n{oops\n"}, lp, "1.jsonl:2: invalid JSON")

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
