"""Trainer logs in (verl, TRL GRPO, OpenRLHF, OpenPipe ART), rewards out."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, chat_text, invoke, judge_env, last_said, new_run

TRAINERS = EXAMPLES / "trainers"
CANONICAL = [json.loads(line) for line in (EXAMPLES / "math" / "step-002.jsonl").read_text().splitlines()][:6]


@pytest.mark.parametrize(("file", "extra"), [
    ("verl/2.jsonl", []), ("trl_grpo.jsonl", []), ("openrlhf.jsonl", []),
    ("art.jsonl", ["--map", "supplemental_context=metadata.reference"]),
])
def test_each_trainer_log_scores_like_the_canonical_file(tmp_path: Path, sim, file: str, extra: list[str]) -> None:
    run = new_run(tmp_path)
    result = invoke("score", TRAINERS / file, "--run", run, "--step", "2", *extra, env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    stored = [json.loads(line) for line in (run / "steps/000002/rollouts.jsonl").read_text().splitlines()]
    assert [r["output"] for r in stored] == [r["output"] for r in CANONICAL]
    assert [r["supplemental_context"] for r in stored] == [r["supplemental_context"] for r in CANONICAL]
    assert all(last_said(r["input"]).endswith(c["input"]) for r, c in zip(stored, CANONICAL, strict=True))
    listed = json.loads(invoke("rewards", "--run", run, "--step", "2", "--format", "list").stdout)
    assert len(listed) == 6 and all(isinstance(x, float) for x in listed)


def test_verl_step_directory_is_a_loop_input(tmp_path: Path, sim) -> None:
    run = new_run(tmp_path)
    result = invoke("loop", TRAINERS / "verl", "--run", run, "--json", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    assert [s["step"] for s in json.loads(result.stdout)["steps"]] == [2]


def test_rewards_keyed_by_id_and_in_input_order_with_failures_as_null(tmp_path: Path, sim_factory) -> None:
    run = new_run(tmp_path)
    judge = sim_factory(agent_faults={"scorer": "wrong_shape"})
    rows = [{"id": f"r{i}", "input": "What is 2+2?", "output": "4", "answer": "4"} for i in range(3)]
    source = tmp_path / "r.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert invoke("score", source, "--run", run, "--step", "0", "--on-error", "skip", env=judge_env(judge)).exit_code == 0
    lines = [json.loads(line) for line in invoke("rewards", "--run", run, "--step", "0").stdout.splitlines()]
    assert lines == [{"id": f"r{i}", "reward": None, "status": "failed"} for i in range(3)]
    assert json.loads(invoke("rewards", "--run", run, "--step", "0", "--format", "list", "--failed-as", "0").stdout) == [0.0] * 3
    out = tmp_path / "rewards.json"
    assert invoke("rewards", "--run", run, "--step", "0", "--format", "list", "-o", out).exit_code == 0
    assert json.loads(out.read_text()) == [None, None, None]
    for value in ("nan", "inf", "-inf", "1e400"):  # JSON has neither: they were written as null
        refused = invoke("rewards", "--run", run, "--step", "0", "--format", "list", "--failed-as", value, "-o", out)
        assert refused.exit_code == 2 and "a reward must be a finite number" in refused.stderr, refused.stderr
    assert json.loads(out.read_text()) == [None, None, None]  # the file written before is as it was
    missing = invoke("rewards", "--run", run, "--step", "9")
    assert missing.exit_code == 2 and "step 9 does not exist; the run has steps 0" in missing.stderr


def test_art_trajectories_with_the_sdks_choice_objects_are_read_as_art_reads_them(tmp_path: Path, sim) -> None:
    """OpenPipe ART keeps the turns it trains on as the openai SDK's `Choice` objects inside messages_and_choices
    (a Trajectory dumped as JSON holds `{"finish_reason", "index", "logprobs", "message": {...}}`), and its own
    Trajectory.messages() reads each as its message. amaris refused such a list ("must be a list of {role,
    content} objects"). A refusal (no content, `refusal` set) is what the model said."""
    from openai.types.chat import ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice

    def trajectory(answer: ChatCompletionMessage, reference: str) -> dict:
        choice = Choice(finish_reason="stop", index=0, logprobs=None, message=answer)
        return {"messages_and_choices": [{"role": "system", "content": "Solve it."},
                                         {"role": "user", "content": "What is 6*7?"}, choice.model_dump(mode="json")],
                "reward": 0.0, "metrics": {}, "metadata": {"reference": reference}, "logs": []}

    rows = [trajectory(ChatCompletionMessage(role="assistant", content="6*7 = 42.\nFinal answer: 42"), "42"),
            trajectory(ChatCompletionMessage(role="assistant", content=None, refusal="I can't help with that."), "42")]
    source = tmp_path / "art.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = new_run(tmp_path)
    result = invoke("score", source, "--run", run, "--step", "0", "--map", "supplemental_context=metadata.reference",
                    env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    stored = [json.loads(line) for line in (run / "steps/000000/rollouts.jsonl").read_text().splitlines()]
    assert [r["output"] for r in stored] == ["6*7 = 42.\nFinal answer: 42", "I can't help with that."]
    assert stored[0]["input"] == chat_text({"role": "system", "content": "Solve it."}, {"role": "user", "content": "What is 6*7?"})


def test_an_art_trajectory_with_additional_histories_is_refused_not_judged_by_its_first_call(tmp_path: Path,
                                                                                                 sim) -> None:
    """An ART Trajectory keeps its other conversations in `additional_histories` (ART's LangGraph integration puts
    an agent's first LLM call in messages_and_choices and every later call there, the final answer in the last).
    amaris judged the last assistant turn of messages_and_choices, the first call's, as the response, and never
    showed the judge the rest; RULER refuses such trajectories ("Additional histories are not supported"). Refused,
    naming the line; an empty list is no other conversation, and --map output=... says where the response is."""
    first_call = [{"role": "user", "content": "What is 6*7? Use the calculator."},
                  {"role": "assistant", "content": "Let me compute it with the calculator."}]
    last_call = [{"role": "user", "content": "What is 6*7? Use the calculator."},
                 {"role": "assistant", "content": "Let me compute it with the calculator."},
                 {"role": "user", "content": "calculator: 42"},
                 {"role": "assistant", "content": "Final answer: 42"}]
    rows = [{"messages_and_choices": first_call, "tools": None, "reward": 0.0, "metrics": {}, "metadata": {},
             "logs": [], "additional_histories": []},
            {"messages_and_choices": first_call, "tools": None, "reward": 0.0, "metrics": {}, "metadata": {},
             "logs": [], "additional_histories": [{"messages_and_choices": last_call, "tools": None}]}]
    source = tmp_path / "art.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = invoke("score", source, "--run", new_run(tmp_path), "--step", "0", env=judge_env(sim))
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and f"{source}:2: the trajectory has 1 additional history" in said, said
    assert f"{source}:1:" not in said and not sim.requests
    mapped = invoke("score", source, "--run", new_run(tmp_path, "mapped"), "--step", "0",
                    "--map", "output=additional_histories.-1.messages_and_choices.-1.content", env=judge_env(sim))
    assert mapped.exit_code == 2 and f"{source}:1: --map output=" in " ".join(mapped.stderr.split())
    rows[0]["additional_histories"] = [{"messages_and_choices": last_call, "tools": None}]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mapped = invoke("score", source, "--run", new_run(tmp_path, "mapped2"), "--step", "0",
                    "--map", "output=additional_histories.-1.messages_and_choices.-1.content",
                    "--map", "input=messages_and_choices.0.content", env=judge_env(sim))
    assert mapped.exit_code == 0, mapped.stderr
    stored = [json.loads(line) for line in (tmp_path / "mapped2/steps/000000/rollouts.jsonl").read_text().splitlines()]
    assert [r["output"] for r in stored] == ["Final answer: 42"] * 2


def test_an_art_parquet_rows_additional_histories_held_in_its_trajectory_json_are_seen(tmp_path: Path, sim) -> None:
    """ART's v2 Parquet log (format_version 2) keeps the whole Trajectory as `trajectory_json` and its main history
    alone, flattened, as `messages`: the other LLM calls are in trajectory_json's additional_histories only. The row
    was read by its messages, and its first call's last assistant turn judged as the response."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    messages = [{"role": "user", "content": "What is 6*7?", "tool_calls": None, "tool_call_id": None, "trainable": False},
                {"role": "assistant", "content": "Let me compute it.", "tool_calls": None, "tool_call_id": None,
                 "trainable": True}]
    shown = [{k: m[k] for k in ("role", "content")} for m in messages]
    last_call = [*shown, {"role": "user", "content": "calculator: 42"}, {"role": "assistant", "content": "42"}]

    def row(index: int, histories: list) -> dict:
        whole = {"messages_and_choices": shown, "reward": 0.0, "metrics": {}, "metadata": {}, "logs": []}
        if histories:
            whole["additional_histories"] = histories
        return {"format_version": 2, "group_index": 0, "trajectory_index": index, "group_json": "{}",
                "trajectory_json": json.dumps(whole), "reward": 0.0, "metadata": None, "metrics": None,
                "tools": None, "messages": messages}

    path = tmp_path / "0000.parquet"
    pq.write_table(pa.Table.from_pylist([row(0, []), row(1, [{"messages_and_choices": last_call, "tools": None}])]),
                   path)
    result = invoke("score", path, "--run", new_run(tmp_path), "--step", "0", env=judge_env(sim))
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and f"{path}:2: the trajectory has 1 additional history" in said, said
    assert f"{path}:1:" not in said and not sim.requests


def test_a_uid_or_example_id_shared_by_several_rollouts_names_their_prompt(tmp_path: Path, sim) -> None:
    """verifiers writes one row per rollout with its example's `example_id` (n rollouts per example share it), and
    verl's GRPO `uid` names a prompt's group: amaris took them as rollout ids and refused the file ("duplicate id
    '0'"). Shared by several rollouts, such a value names their prompt: each gets its content id and keeps the value
    in its metadata, and their instance is their prompt's, as for a prompt the file holds once (a per-instance run
    keeps one rubric per prompt whichever file holds it how often). Unique, it is the id (OpenRLHF's file above);
    given as the id by the user (`--map id=...`), or equal to another line's `id`, a repeat is still an error."""
    prompt = [{"role": "user", "content": "What is 2+2?"}]
    rows = [{"example_id": 0, "prompt": prompt, "completion": [{"role": "assistant", "content": answer}], "answer": "4",
             "task": "math", "reward": reward} for answer, reward in (("4", 1.0), ("5", 0.0), ("4", 1.0))]
    rows.append({"example_id": 1, "prompt": [{"role": "user", "content": "What is 3+3?"}],
                 "completion": [{"role": "assistant", "content": "6"}], "answer": "6"})
    source = tmp_path / "results.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = new_run(tmp_path)
    result = invoke("score", source, "--run", run, "--step", "0", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    stored = [json.loads(line) for line in (run / "steps/000000/rollouts.jsonl").read_text().splitlines()]
    assert [r["metadata"]["example_id"] for r in stored[:3]] == ["0", "0", "0"] and stored[3]["id"] == "1"
    assert all(r["instance_id"] is None for r in stored)
    ids = [r["id"] for r in stored[:3]]
    assert ids[0].startswith("r-") and ids[2] == ids[0] + "-2" and len(set(ids)) == 3  # the repeat is numbered
    listed = json.loads(invoke("rewards", "--run", run, "--step", "0", "--format", "list").stdout)
    assert len(listed) == 4 and listed[0] == listed[2] > listed[1]
    mapped = invoke("score", source, "--run", new_run(tmp_path, "mapped"), "--step", "0", "--map", "id=example_id",
                    env=judge_env(sim))
    assert mapped.exit_code == 2 and "duplicate id '0' (first on line 1)" in mapped.stderr, mapped.stderr
    clash = tmp_path / "clash.jsonl"
    clash.write_text(json.dumps({"id": "u1", "input": "q", "output": "a"}) + "\n"
                     + json.dumps({"uid": "u1", "input": "q", "output": "b"}) + "\n")
    clashed = invoke("score", clash, "--run", new_run(tmp_path, "clash"), "--step", "0", env=judge_env(sim))
    assert clashed.exit_code == 2 and "clash.jsonl:2: duplicate id 'u1' (also on line 1)" in clashed.stderr
    # One value under two fields, once each: two ids alike, not a prompt's (each field would be mislabelled).
    clash.write_text(json.dumps({"uid": "x", "input": "q", "output": "a"}) + "\n"
                     + json.dumps({"example_id": "x", "input": "q", "output": "b"}) + "\n")
    clashed = invoke("score", clash, "--run", new_run(tmp_path, "fields"), "--step", "0", env=judge_env(sim))
    assert clashed.exit_code == 2 and "clash.jsonl:2: duplicate id 'x' (also on line 1)" in clashed.stderr


def test_a_rollout_whose_uid_names_its_prompt_is_named_by_its_own_request_id() -> None:
    """A line with a shared `uid` and its own `request_id` (verl's rollout dumps carry one, sometimes): the uid names
    the prompt, and the rollout was given its content id, its request_id kept nowhere. It is the rollout's id now;
    a line of the group without one gets its content id, and a request_id given twice is still an error."""
    from amaris_cli.errors import InputErrors
    from amaris_cli.rollouts import content_id, parse_rollouts

    rows = [{"uid": "p1", "request_id": "req-a", "input": "q", "output": "a"},
            {"uid": "p1", "request_id": 7, "input": "q", "output": "b"},
            {"uid": "p1", "input": "q", "output": "c"},
            {"uid": "p2", "request_id": "req-c", "input": "r", "output": "d"}]
    read = parse_rollouts("".join(json.dumps(r) + "\n" for r in rows).encode(), Path("verl.jsonl"))
    assert [r.id for r in read[:2]] == ["req-a", "7"] and read[2].id == content_id(read[2]) and read[3].id == "p2"
    assert [r.metadata for r in read] == [{"uid": "p1"}] * 3 + [{}]
    rows[1]["request_id"] = "req-a"
    with pytest.raises(InputErrors, match=r"verl.jsonl:2: duplicate id 'req-a' \(first on line 1\)"):
        parse_rollouts("".join(json.dumps(r) + "\n" for r in rows).encode(), Path("verl.jsonl"))
    rows[1]["request_id"], rows[3] = "b", {"id": "req-a", "input": "s", "output": "e"}  # an explicit id, later
    with pytest.raises(InputErrors, match=r"verl.jsonl:1: duplicate id 'req-a' \(also on line 4\)"):
        parse_rollouts("".join(json.dumps(r) + "\n" for r in rows).encode(), Path("verl.jsonl"))


def test_arts_parquet_trajectory_log_is_a_step_file_read_as_art_reads_it(tmp_path: Path, sim) -> None:
    """OpenPipe ART 0.5 logs each step's trajectories as trajectories/SPLIT/NNNN.parquet (written here by ART's own
    write_trajectory_groups_parquet, examples/trainers/make_art_parquet.py): amaris read JSONL only. A row's
    messages (flattened by ART, JSON text in columns) are the trajectory's, so the file scores as its JSONL dump."""
    run = new_run(tmp_path)
    result = invoke("loop", TRAINERS / "art", "--run", run, "--map", "supplemental_context=metadata.reference",
                    "--json", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    assert [s["step"] for s in json.loads(result.stdout)["steps"]] == [2], "the step is the file name's"
    stored = [json.loads(line) for line in (run / "steps/000002/rollouts.jsonl").read_text().splitlines()]
    assert [r["output"] for r in stored] == [r["output"] for r in CANONICAL]
    assert [r["supplemental_context"] for r in stored] == [r["supplemental_context"] for r in CANONICAL]
    assert all(last_said(r["input"]).endswith(c["input"]) for r, c in zip(stored, CANONICAL, strict=True))
    dumped = new_run(tmp_path, "dumped")
    assert invoke("score", TRAINERS / "art.jsonl", "--run", dumped, "--step", "2", "--map",
                  "supplemental_context=metadata.reference", env=judge_env(sim)).exit_code == 0
    listed = [invoke("rewards", "--run", r, "--step", "2", "--format", "list").stdout for r in (run, dumped)]
    assert listed[0] == listed[1] and len(json.loads(listed[0])) == 6


def test_an_art_step_file_is_read_by_its_content_and_given_to_loop_says_to_pass_its_directory(tmp_path: Path,
                                                                                                sim) -> None:
    """A Parquet file was told by its name alone: `X.PARQUET` (or a pipe) was read as JSONL, an error on each
    line. One ART step file given to `loop`, as a user holding trajectories/train/0002.parquet would, said "no
    step field" for every row, with no word of what to pass instead."""
    shouted = tmp_path / "STEP2.PARQUET"
    shutil.copyfile(TRAINERS / "art" / "0002.parquet", shouted)
    result = invoke("score", shouted, "--run", new_run(tmp_path), "--step", "2", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    misnamed = tmp_path / "step2.jsonl"  # told by its bytes, not its name
    shutil.copyfile(TRAINERS / "art" / "0002.parquet", misnamed)
    result = invoke("score", misnamed, "--run", new_run(tmp_path, "misnamed"), "--step", "2", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    result = invoke("loop", TRAINERS / "art" / "0002.parquet", "--run", new_run(tmp_path, "loop"), env=judge_env(sim))
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and said.count("step field") == 1, said
    assert (f"{TRAINERS / 'art' / '0002.parquet'}:1: no line of the file has a step field, which one file that holds "
            "many steps needs; its name says it is step 2: give `loop` the directory") in said, said
    # Another ART version's rows (other message fields) are not read as generic rows with JSON held as text.
    import pyarrow as pa
    import pyarrow.parquet as pq

    near = tmp_path / "0003.parquet"
    pq.write_table(pa.Table.from_pylist([{"reward": 0.0, "metadata": '{"reference": "4"}', "messages": [
        {"role": "user", "content": "What is 2+2?", "trainable": False, "name": None},
        {"role": "assistant", "content": "4", "trainable": True, "name": None}]}]), near)
    result = invoke("score", near, "--run", new_run(tmp_path, "near"), "--step", "3", "--map",
                    "supplemental_context=metadata.reference", env=judge_env(sim))
    assert result.exit_code == 2 and (f"{near}:1: the row looks like an OpenPipe ART trajectory (its messages carry "
                                      "'trainable') but its messages' fields are ['content', 'name', 'role', "
                                      "'trainable']") in " ".join(result.stderr.split()), result.stderr
    # Such a row whose metadata is not text read before, and still does (its other columns are not amaris's).
    pq.write_table(pa.Table.from_pylist([{"metrics": '{"x": 1}', "messages": [
        {"role": "user", "content": "What is 2+2?", "trainable": False},
        {"role": "assistant", "content": "4", "trainable": True}]}]), near)
    result = invoke("score", near, "--run", new_run(tmp_path, "near-ok"), "--step", "3", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    # A file where some lines carry a step still names each line that does not.
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"input": "p", "output": "o", "step": 0}\n{"input": "q", "output": "o"}\n')
    result = invoke("loop", mixed, "--run", new_run(tmp_path, "mixed"), env=judge_env(sim))
    assert result.exit_code == 2 and f"{mixed}:2: the line has no step field" in result.stderr, result.stderr


def test_a_parquet_file_amaris_cannot_use_is_an_error_naming_it_and_the_row(tmp_path: Path, sim,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = tmp_path / "3.parquet"
    pq.write_table(pa.Table.from_pylist([{"input": "2+2?", "output": "4"}, {"input": "3+3?"}]), bad)
    result = invoke("score", bad, "--run", new_run(tmp_path), "--step", "3", env=judge_env(sim))
    assert result.exit_code == 2 and f"{bad}:2: " in result.stderr, result.stderr
    garbage = tmp_path / "4.parquet"
    garbage.write_bytes(b"PAR1 not really")
    result = invoke("score", garbage, "--run", new_run(tmp_path, "g"), "--step", "4", env=judge_env(sim))
    assert result.exit_code == 2 and f"{garbage}: not a readable Parquet file" in result.stderr, result.stderr
    # Compressed columns hold far more than the file's size: the input limit holds for the rows as JSON lines.
    from amaris_cli.errors import InputError
    from amaris_cli.rollouts import read_rollout_file

    dense = tmp_path / "5.parquet"
    pq.write_table(pa.Table.from_pylist([{"input": "q" * 1000, "output": "a"}] * 200), dense)
    assert dense.stat().st_size < 20_000
    with pytest.raises(InputError, match=r"its rows come to more than the 50000 bytes input limit as JSON lines"):
        read_rollout_file(dense, max_input_bytes=50_000)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as where pyarrow is not installed
    result = invoke("score", bad, "--run", new_run(tmp_path, "p"), "--step", "3", env=judge_env(sim))
    assert result.exit_code == 2 and "reading Parquet needs pyarrow: pip install 'amaris[parquet]'" in result.stderr


def _art_row(metadata: str) -> dict:
    turn = {"tool_calls": None, "tool_call_id": None}
    return {"group_index": 0, "reward": 0.0, "metadata": metadata, "messages": [
        {"role": "user", "content": "What is 2+2?", **turn, "trainable": False},
        {"role": "assistant", "content": "Final answer: 4", **turn, "trainable": True}]}


@pytest.mark.parametrize(("rows", "said"), [
    # each would be read as a value the writer may not have meant: refused, as in a JSONL line
    ([_art_row('{"reference": "4", "reference": "5"}')], "column 'metadata': duplicate key 'reference'"),
    ([_art_row('{"reference": 123456789012345678901234567890}')], "column 'metadata': integer 1234567890"),
    ([_art_row('{"reference": NaN}')], "column 'metadata' is not JSON"),
    ([{"input": "2+2?", "output": "4", "reference": float("nan")}], "a value is nan, which JSON has no form for"),
    ([{"input": b"2+2?", "output": b"4"}], "a value has no JSON form (Type is not JSON serializable: bytes)"),
], ids=["duplicate key", "integer beyond 64 bits", "NaN in JSON text", "NaN", "bytes"])
def test_a_parquet_value_is_never_read_as_another(tmp_path: Path, sim, rows: list[dict], said: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "1.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    result = invoke("score", source, "--run", new_run(tmp_path), "--step", "1", "--map",
                    "supplemental_context=metadata.reference" if "messages" in rows[0] else "supplemental_context=reference",
                    env=judge_env(sim))
    assert result.exit_code == 2 and f"{source}:1: {said}" in " ".join(result.stderr.split()), result.stderr
    twice = tmp_path / "2.parquet"
    pq.write_table(pa.table([pa.array(["2+2?"]), pa.array(["4"]), pa.array(["5"])], names=["input", "output", "output"]),
                   twice)
    result = invoke("score", twice, "--run", new_run(tmp_path, "twice"), "--step", "2", env=judge_env(sim))
    assert result.exit_code == 2 and "column 'output' appears more than once" in result.stderr, result.stderr
