"""`replay` reproduces a recorded run exactly and cheaply; ablations re-call only what changed."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from tests.conftest import (
    EXAMPLES,
    FAST_MEMORY,
    TEST_CONFIG,
    WORKED_ROW,
    calls,
    invoke,
    judge_env,
    new_run,
    new_scenario_run,
    outputs,
    read_only_copy,
    scores,
    snapshot,
    write_jsonl,
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimJudge]:
    tmp = tmp_path_factory.mktemp("replay")
    judge = SimJudge(SimJudgeConfig()).start_in_thread()
    run = new_run(tmp, "src")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:3", "--rescore", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    yield run, judge
    judge.stop()


def test_unchanged_replay_is_byte_identical_and_calls_no_model(recorded, tmp_path) -> None:
    src, judge = recorded
    before = judge.stats["requests"]
    result = invoke("replay", src, "--out", tmp_path / "dst", "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert judge.stats["requests"] == before, "no request may reach the judge server"
    out = json.loads(result.stdout)
    assert out["calls_made"] == 0 and out["calls_reused"] == len(calls(src))
    assert outputs(tmp_path / "dst") == outputs(src)
    assert {c["source"] for c in calls(tmp_path / "dst")} == {"replay"}


def test_dynamic_off_replay_is_identical_until_the_first_update_and_counts_are_exact(recorded, tmp_path) -> None:
    src, judge = recorded
    before = judge.stats["requests"]
    result = invoke("replay", src, "--out", tmp_path / "nodyn", "--no-dynamic", "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    dst = tmp_path / "nodyn"
    same, changed = outputs(src), outputs(dst)
    for name in ("rollouts.jsonl", "scores.jsonl", "analyses.jsonl", "summary.json", "stats.json"):
        assert changed[f"steps/000000/{name}"] == same[f"steps/000000/{name}"]
    assert changed["steps/000000/retrieval.json"] != same["steps/000000/retrieval.json"]
    # Expected: no query generation, and a new updater request wherever the record's updater saw dynamic hits.
    src_calls = calls(src)
    with_hits = [c for c in src_calls if c["agent"] == "updater" and "(none)" not in c["messages"][1]["content"].split("Dynamic memory")[1]]
    queries = [c for c in src_calls if c["agent"] == "query_generator"]
    out = json.loads(result.stdout)
    assert out["calls_made"] == len(with_hits) > 0
    assert out["calls_reused"] == len(src_calls) - len(queries) - len(with_hits)
    assert judge.stats["requests"] - before == len(with_hits)


def test_offline_miss_is_a_clear_error_and_writes_nothing(recorded, tmp_path) -> None:
    src, judge = recorded
    before = judge.stats["requests"]
    result = invoke("replay", src, "--out", tmp_path / "off", "--offline", "--no-dynamic", env=judge_env(judge))
    assert result.exit_code == 5
    assert "--offline: step 1, agent updater" in result.stderr
    assert "differs from character" in result.stderr
    assert judge.stats["requests"] == before
    assert not (tmp_path / "off").exists()


def test_an_offline_miss_on_a_damaged_record_says_where_it_is(recorded, tmp_path) -> None:
    """A request the source recorded, on a line of its calls.jsonl that no longer reads (a flipped byte): --offline
    said the source had recorded no such request at all."""
    import shutil

    src, judge = recorded
    copy = Path(shutil.copytree(src, tmp_path / "src"))
    log = copy / "calls.jsonl"
    data = bytearray(log.read_bytes())
    data[10] = 0xFF  # in line 1, the first scorer request
    log.write_bytes(bytes(data))
    result = invoke("replay", copy, "--out", tmp_path / "off", "--offline", env=judge_env(judge))
    assert result.exit_code == 5, result.stderr
    assert "the source recorded this request, but its record, line 1, is damaged (not JSON)" in result.stderr, \
        result.stderr


def test_a_run_recorded_before_the_judge_scale_check_replays_offline_as_it_was(recorded, tmp_path) -> None:
    """A run recorded by an amaris that did not check the judge's scale has no `scale check` call: its offline
    replay stopped at the probe (exit 5). It takes the replies as the recorded run took them, and says so."""
    src, judge = recorded
    old = Path(shutil.copytree(src, tmp_path / "old"))
    lines = (old / "calls.jsonl").read_bytes().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["context"] != "scale check"]
    assert len(kept) == len(lines) - 1
    (old / "calls.jsonl").write_bytes(b"".join(kept))
    shutil.rmtree(old / ".calls-index")
    (old / "judge-scale.json").unlink()
    result = invoke("replay", old, "--out", tmp_path / "off", "--offline", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert "recorded before amaris checked the judge's scale" in result.stderr
    assert outputs(tmp_path / "off") == outputs(src)
    assert not (tmp_path / "off" / "judge-scale.json").exists(), "an outcome not checked is not kept"
    # A run that holds an outcome checked the scale: its missing probe is a miss, as before.
    shutil.copy(src / "judge-scale.json", old / "judge-scale.json")
    again = invoke("replay", old, "--out", tmp_path / "again", "--offline", env=judge_env(judge))
    assert again.exit_code == 5 and "(scale check)" in again.stderr, again.stderr


@pytest.mark.parametrize("index", ["kept", "deleted"])
def test_a_run_whose_scale_check_failed_is_never_replayed_unchecked(tmp_path, sim_factory, index) -> None:
    """The source's probe got an invalid answer, so its reply of 1s failed. That run keeps judge-scale.json
    without an outcome, which says it checked; and without that file, its probe's record that no longer reads
    (a damaged line) may be the check: either way its offline replay stops (exit 5), naming the damage. Read as
    a run recorded before the check, the replay scored the reply 1.0 where the source had failed it."""
    judge = sim_factory(fault_plan=["", "wrong_shape"])  # the reply as usual (1s), the probe an invalid answer
    src = new_scenario_run(tmp_path, "src")
    rows = [WORKED_ROW]
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", rows), "--run", src, "--step", "0", "--on-error",
                    "skip", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert scores(src)["worked"]["status"] == "failed" and "could not be checked" in scores(src)["worked"]["error"]
    assert json.loads((src / "judge-scale.json").read_text()) == {"checks": []}
    (src / "judge-scale.json").unlink()
    lines = (src / "calls.jsonl").read_bytes().splitlines(keepends=True)
    (src / "calls.jsonl").write_bytes(b"".join(b"x" + line[1:] if b'"scale check"' in line else line for line in lines))
    if index == "deleted":
        shutil.rmtree(src / ".calls-index")
    replayed = invoke("replay", src, "--out", tmp_path / "off", "--offline", env=judge_env(judge))
    assert replayed.exit_code == 5, replayed.stderr
    assert "(scale check)" in replayed.stderr and "damaged (not JSON)" in replayed.stderr, replayed.stderr


def test_a_replay_says_it_uses_the_sim_judge_when_a_later_step_of_its_source_used_it(tmp_path, sim) -> None:
    """Step 0 was judged by an endpoint, step 1 by `--judge sim`. The replay's first session (step 0's) starts no
    sim-judge, and only the first session could say so: step 1 was judged by the rule-based sim-judge unsaid."""
    src = new_run(tmp_path, "src")
    for steps, judge in (("0:0", ()), ("1:1", ("--judge", "sim"))):
        result = invoke("loop", EXAMPLES / "math", "--run", src, "--steps", steps, *judge, env=judge_env(sim))
        assert result.exit_code == 0, result.stderr
    replayed = invoke("replay", src, "--out", tmp_path / "dst", env=judge_env(sim))
    assert replayed.exit_code == 0, replayed.stderr
    assert replayed.stderr.count("using amaris's rule-based sim-judge") == 1, replayed.stderr


def test_a_record_the_index_no_longer_finds_says_why(recorded, tmp_path) -> None:
    """A log rewritten under its index (a line shortened before a record): the record is not found, and why is the
    index's offset, which now points into a line, with what to do."""
    import shutil

    from amaris_cli.llm.calllog import CallIndex

    copy = Path(shutil.copytree(recorded[0], tmp_path / "src"))
    log = copy / "calls.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    second = json.loads(lines[1])
    log.write_bytes(lines[0][:5] + lines[0][10:] + b"".join(lines[1:]))  # line 1 five bytes shorter
    index = CallIndex(log)
    assert index.find(second["step"], second["request_hash"], accepted_only=False) is None
    assert index.damage(second["step"], second["request_hash"]) == (
        f"its index points into line 2 of the log, which was cut or rewritten since (delete {copy / '.calls-index'} "
        "to index the log again)")


def test_a_log_without_an_index_still_finds_a_step_a_long_lived_process_forgot(recorded, tmp_path) -> None:
    """Without .calls-index the log is scanned once, for every step. `amaris serve` forgets each step it completes;
    the step's answers were then never found again (the scan was not repeated), though the log holds them."""
    import shutil

    from amaris_cli.llm.calllog import INDEX_DIR, CallIndex

    copy = Path(shutil.copytree(recorded[0], tmp_path / "src"))
    shutil.rmtree(copy / INDEX_DIR)
    record = json.loads((copy / "calls.jsonl").read_bytes().splitlines()[0])
    index = CallIndex(copy / "calls.jsonl")
    assert index.find(record["step"], record["request_hash"], accepted_only=False) is not None
    index.forget(record["step"])
    assert index.find(record["step"], record["request_hash"], accepted_only=False) is not None


def test_a_record_past_the_end_of_a_cut_log_is_not_called_a_damaged_line(recorded, tmp_path) -> None:
    """A log cut under its index (its first three lines kept): the fourth line's record was 'line 4, damaged (not
    JSON)', a line the log does not have."""
    import shutil

    src, judge = recorded
    copy = Path(shutil.copytree(src, tmp_path / "src"))
    log = copy / "calls.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3]))
    result = invoke("replay", copy, "--out", tmp_path / "off", "--offline", env=judge_env(judge))
    assert result.exit_code == 5, result.stderr
    # Which record the replay misses first depends on the order its concurrent requests run in: any past the cut.
    said = " ".join(result.stderr.split())
    found = re.search(r"the source recorded this request, but its index points past the end of the log \(to a record "
                      r"at byte (\d+)\), which was cut since \(delete (\S+) to index the log again\)", said)
    assert found and int(found.group(1)) >= sum(map(len, lines[:3])), result.stderr
    assert found.group(2) == str(copy / ".calls-index"), result.stderr
    assert "line 4" not in result.stderr, result.stderr


def test_an_offline_miss_of_a_source_without_an_index_names_its_damaged_lines(recorded, tmp_path) -> None:
    """A read-only source without .calls-index (a run from before it, or one whose index was deleted to index its
    log again) is scanned in memory, where a line that is not JSON was skipped unseen: the miss of the request it
    held said the request differed from another record of the rollout (its re-scoring), not that its record may
    be the damaged line."""
    import shutil

    from tests.conftest import read_only_copy

    src, judge = recorded
    stage = Path(shutil.copytree(src, tmp_path / "stage"))
    shutil.rmtree(stage / ".calls-index")
    log = stage / "calls.jsonl"
    data = bytearray(log.read_bytes())
    data[10] = 0xFF  # in line 1, the first scorer request
    log.write_bytes(bytes(data))
    with read_only_copy(stage, tmp_path / "ro") as ro:
        result = invoke("replay", ro, "--out", tmp_path / "off", "--offline", env=judge_env(judge))
    assert result.exit_code == 5, result.stderr
    assert ("but line 1 of the log is damaged (not JSON) and may be its record (the log has no index)"
            in " ".join(result.stderr.split())), result.stderr


def test_replay_into_another_run_is_refused(recorded, tmp_path) -> None:
    src, judge = recorded
    result = invoke("replay", src, "--out", src, env=judge_env(judge))
    assert result.exit_code == 1 and "not a replay of" in result.stderr


def test_compare_puts_runs_side_by_side(recorded, tmp_path) -> None:
    src, judge = recorded
    invoke("replay", src, "--out", tmp_path / "again", env=judge_env(judge))
    result = invoke("compare", src, tmp_path / "again", "--json")
    assert result.exit_code == 0, result.stderr
    a, b = json.loads(result.stdout)["runs"]
    assert a["mean_reward"] == b["mean_reward"] and len(a["mean_reward"]) == 4
    assert (a["calls_made"], a["calls_reused"]) == (len(calls(src)), 0)
    assert (b["calls_made"], b["calls_reused"]) == (0, len(calls(src)))
    assert a["strategies"] and a["final_rubric_size"] >= 3


# --- red team -----------------------------------------------------------------------------------------------
# A replay must reproduce runs in which one request was recorded with several answers.
#
# A request is named by its hash, and the same hash is sent again in two ordinary situations: a judge that
# gives the same invalid answer twice makes the second re-ask identical to the first (same conversation,
# same reason), and `score` re-run to retry a failed rollout sends that rollout's request again. calls.jsonl
# then holds an invalid answer and, later, the accepted one. A replay that answers with the first recorded
# line takes the invalid path again and fails where the source succeeded.


@pytest.mark.parametrize("invalid, runs", [(2, 1), (3, 2)], ids=["identical-reask", "retried-by-a-rerun"])
def test_a_request_recorded_with_an_invalid_then_an_accepted_answer_replays(tmp_path, sim_factory, invalid, runs) -> None:
    # --concurrency 1: the first rollout gets the `invalid` wrong-shape answers in a row (its request,
    # then its re-asks); with 3 it fails (2 re-asks) and the second `score` retries it.
    judge = sim_factory(fault_plan=["wrong_shape"] * invalid)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    codes = [invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, "--concurrency", 1,
                    "--on-error", "fail", env=judge_env(judge)).exit_code for _ in range(runs)]
    assert codes[-1] == 0 and codes[:-1] == [4] * (runs - 1)
    hashes = Counter(json.loads(line)["request_hash"] for line in (run / "calls.jsonl").read_text().splitlines())
    assert max(hashes.values()) == 2, "the scenario needs one request recorded twice"

    result = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert result.exit_code == 0, result.stderr
    assert outputs(tmp_path / "replayed") == outputs(run)


@pytest.mark.parametrize("stages", [("analyze",), ("analyze", "summarize")], ids=["analyzed", "summarized"])
def test_a_step_evolved_stage_by_stage_without_an_update_replays(tmp_path, sim, stages) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + FAST_MEMORY)
    run = tmp_path / "run"
    env = judge_env(sim)
    assert invoke("init", run, "--config", config).exit_code == 0
    for args in (("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, "--lag", 1),
                 ("evolve", "--run", run, "--step", 0),
                 ("score", EXAMPLES / "math/step-001.jsonl", "--run", run, "--step", 1, "--lag", 1),
                 *((stage, "--run", run, "--step", 1) for stage in stages)):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.stderr
    result = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", env=env)  # env: the embeddings
    assert result.exit_code == 0, result.stderr
    got, expected = outputs(tmp_path / "replayed"), outputs(run)
    assert "steps/000001/analyses.jsonl" in expected
    assert ("steps/000001/summary.json" in expected) == ("summarize" in stages)
    assert sorted(set(expected) - set(got)) == []
    assert got == expected


def test_a_replay_says_which_steps_failed_to_evolve_in_its_source(tmp_path, sim_factory) -> None:
    """A source step whose evolution failed (the updater broke the contract every time) is replayed up to the
    files it wrote; the replay says so, with the source's error, rather than show a clean run of that step."""
    failing = sim_factory(agent_fault_rate={"updater": 1.0})
    src = new_run(tmp_path, "src")
    looped = invoke("loop", EXAMPLES / "math", "--run", src, "--steps", "0:0", env=judge_env(failing))
    assert looped.exit_code != 0 and "the updater failed" in looped.stderr, looped.stderr
    replayed = invoke("replay", src, "--out", tmp_path / "dst", "--offline", env=judge_env(failing))
    assert replayed.exit_code == 0, replayed.stderr
    said = " ".join(replayed.stderr.split())
    assert "step 0: its evolution failed in" in said and "(step 0: the updater failed: invalid answer" in said, said
    assert "leaves the step unevolved" in said
    assert (tmp_path / "dst" / "steps" / "000000" / "summary.json").is_file()
    assert not (tmp_path / "dst" / "steps" / "000000" / "update.json").exists()


@pytest.fixture(scope="module")
def endpoint_embedded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose memory embeds through an endpoint (memory.embedding = "openai", the sim-judge's), the judge
    gone once it is recorded."""
    tmp = tmp_path_factory.mktemp("endpoint-embedded")
    judge = SimJudge(SimJudgeConfig()).start_in_thread()
    try:
        src = new_scenario_run(tmp, "src")
        result = invoke("loop", EXAMPLES / "math", "--run", src, "--steps", "0:2", env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
    finally:
        judge.stop()
    retrieved = json.loads((src / "steps" / "000002" / "retrieval.json").read_text())
    assert retrieved["dynamic"], "the memory must be searched and found for the tests to mean anything"
    return src


def test_a_run_whose_memory_embeds_through_an_endpoint_replays_offline(endpoint_embedded, tmp_path) -> None:
    """`replay --offline` rebuilds the memory, so it asked the embeddings endpoint and stopped without one. The
    run records the vectors its endpoint gave (RUN/embeddings), and the replay reads the source's record, never
    writing it."""
    src = endpoint_embedded
    before = snapshot(src)
    result = invoke("replay", src, "--out", tmp_path / "offline", "--offline", "--json")  # no endpoint at all
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["calls_made"] == 0
    assert outputs(tmp_path / "offline") == outputs(src)
    assert snapshot(src) == before


def test_an_offline_replay_records_what_it_read_and_replays_offline_from_a_read_only_copy(
        endpoint_embedded, tmp_path) -> None:
    assert invoke("replay", endpoint_embedded, "--out", tmp_path / "offline", "--offline").exit_code == 0
    with read_only_copy(tmp_path / "offline", tmp_path / "ro") as ro:
        again = invoke("replay", ro, "--out", tmp_path / "again", "--offline")
    assert again.exit_code == 0, again.stderr
    assert outputs(tmp_path / "again") == outputs(endpoint_embedded)


def test_an_offline_replay_of_a_source_without_the_record_is_a_miss_naming_it(endpoint_embedded, tmp_path) -> None:
    bare = Path(shutil.copytree(endpoint_embedded, tmp_path / "bare", ignore=shutil.ignore_patterns("embeddings")))
    missed = invoke("replay", bare, "--out", tmp_path / "missed", "--offline")
    assert missed.exit_code == 5, missed.stderr
    assert f"{bare / 'embeddings'} records no vector for" in missed.stderr and "run without --offline" in missed.stderr
    assert not (tmp_path / "missed").exists()


def test_a_loop_with_another_schedule_over_steps_the_stage_commands_evolved_keeps_their_updates(
        tmp_path, sim) -> None:
    """The README's session: `score`, `analyze`, `summarize`, `update` of step 0, then `loop --lag 1 --update-every 2`
    over the run. The loop scored step 0 again under its own settings (the same records, from calls.jsonl), and
    that dropped the step's evolution, so its recorded update: steps 1 and 2 still used the rubric it wrote, the
    provenance said it never updated, and the run no longer replayed (an offline replay stopped, exit 5)."""
    run = new_run(tmp_path, "src")
    env = judge_env(sim)
    for args in (("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0"),
                 ("analyze", "--run", run, "--step", "0"), ("summarize", "--run", run, "--step", "0"),
                 ("update", "--run", run, "--step", "0")):
        assert invoke(*args, env=env).exit_code == 0
    updated = (run / "steps" / "000000" / "update.json").read_bytes()
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--lag", "1", "--update-every", "2", "--steps", "0:2",
                    env=env)
    assert result.exit_code == 0, result.stderr
    assert json.loads((run / "steps" / "000000" / "provenance.json").read_text())["evolution"]["update"] is True
    assert (run / "steps" / "000000" / "update.json").read_bytes() == updated
    replayed = invoke("replay", run, "--out", tmp_path / "offline", "--offline")
    assert replayed.exit_code == 0, replayed.stderr
    assert outputs(tmp_path / "offline") == outputs(run)


def test_a_replay_asks_what_the_environment_of_each_recorded_command_set_whatever_its_own_shell_holds(
        tmp_path, sim) -> None:
    """run.json holds only the config file: answer keys from AMARIS_* variables (a per-agent temperature, the
    role of the instructions) are recorded with each command, so a replay from another shell repeats them."""
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + FAST_MEMORY)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    scoring = judge_env(sim, AMARIS_SCORER_TEMPERATURE="0.3")
    evolving = judge_env(sim, AMARIS_SYSTEM_ROLE="user", AMARIS_UPDATER_MAX_TOKENS="1500")
    for args, env in ((("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, "--lag", 1), scoring),
                      (("evolve", "--run", run, "--step", 0), evolving),
                      (("score", EXAMPLES / "math/step-001.jsonl", "--run", run, "--step", 1, "--lag", 1), scoring)):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.stderr
    sent = calls(run)
    first_roles = {(c["agent"], c["messages"][0]["role"]) for c in sent}
    assert {("analyzer", "user"), ("updater", "user"), ("scorer", "system")} <= first_roles
    assert ("analyzer", "system") not in first_roles and ("updater", "system") not in first_roles
    # Today's shell sets another scorer temperature: the record's wins.
    result = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", "--json",
                    env=judge_env(sim, AMARIS_SCORER_TEMPERATURE="0.9"))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["calls_made"] == 0
    assert "recorded before amaris recorded the environment" not in result.stderr
    assert outputs(tmp_path / "replayed") == outputs(run)
    provenance = json.loads((tmp_path / "replayed/steps/000000/provenance.json").read_text())
    assert provenance["files"]["scores.jsonl"]["environment"] == {"scorer": {"temperature": 0.3}}
    assert provenance["evolution"]["environment"] == {"default": {"system_role": "user"},
                                                      "updater": {"max_tokens": 1500}}
    # A record made before amaris recorded the environment: today's applies, as it did then, and the replay's
    # records hold none, as the source's.
    old = tmp_path / "old"
    assert invoke("init", old, "--config", config).exit_code == 0
    result = invoke("loop", EXAMPLES / "math", "--run", old, "--steps", "0:0", env=evolving)
    assert result.exit_code == 0, result.stderr
    for path in old.glob("steps/*/provenance.json"):
        provenance = json.loads(path.read_text())
        for made in (*provenance["files"].values(), provenance.get("evolution") or {}):
            assert made.pop("environment") == {"default": {"system_role": "user"}, "updater": {"max_tokens": 1500}}
        path.write_bytes(json.dumps(provenance, indent=2).encode())
    result = invoke("replay", old, "--out", tmp_path / "old-replayed", "--offline", env=evolving)
    assert result.exit_code == 0, result.stderr
    said = " ".join(result.stdout.split() + result.stderr.split())
    assert (f"step 0 of {old} was recorded before amaris recorded the environment's answer keys: they get this "
            "shell's (default.system_role = 'user', updater.max_tokens = 1500)") in said
    replayed = json.loads((tmp_path / "old-replayed/steps/000000/provenance.json").read_text())
    assert "environment" not in replayed["files"]["scores.jsonl"] and "environment" not in replayed["evolution"]


def test_a_missing_source_is_named_as_the_replay_s_source_not_a_run_to_create(tmp_path) -> None:
    result = invoke("replay", tmp_path / "nope", "--out", tmp_path / "out", "--offline")
    assert result.exit_code == 2  # bad input
    assert f"{tmp_path / 'nope'}: not an amaris run directory (no run.json); a replay's source is a run" in result.stderr
    assert "amaris init" not in result.stderr
    assert not (tmp_path / "out").exists()

def test_an_offline_miss_points_at_the_block_that_differs(tmp_path, sim) -> None:
    """Not at the block tag, which any change of the request's data changes (every ablation's miss said `differs from
    character 56: ... tagged 62f7...`)."""
    run = new_run(tmp_path, "src", FAST_MEMORY)
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    for flag, block in (("--no-dynamic", "DYNAMIC_MEMORY"), ("--no-static", "STATIC_MEMORY")):
        out = tmp_path / flag.strip("-")
        result = invoke("replay", run, "--out", out, "--offline", flag)
        assert result.exit_code == 5, result.stderr
        said = " ".join(result.stderr.split())
        assert "step 1, agent updater" in said
        assert f"(in block {block}) differs from character" in said, said
        assert not re.search(r"tagged [0-9a-f]{16}", said), said
        assert not out.exists()

def _loop(tmp: Path, name: str, steps: Path, env: dict[str, str], *flags: str) -> Path:
    run = new_run(tmp, name, FAST_MEMORY)
    result = invoke("loop", steps, "--run", run, "--steps", "0:1", *flags, env=env)
    assert result.exit_code == 0, result.stderr
    return run


def _comparable(*runs: Path) -> dict[str, bool]:
    result = invoke("compare", *runs, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)["comparable"]


def test_runs_of_other_rollouts_or_another_judge_are_not_comparable_at_step_0(tmp_path, sim) -> None:
    """compare said a step's rewards were comparable when only the rubrics agreed: runs of other rollouts, or judged by
    another model, were shown side by side as `yes`."""
    env = judge_env(sim)
    base = _loop(tmp_path, "base", EXAMPLES / "math", env)
    other = tmp_path / "other-steps"
    other.mkdir()
    for step in (0, 1):  # the same rubric at step 0, other rollouts
        (other / f"step-{step:03d}.jsonl").write_bytes((EXAMPLES / "recurring" / f"step-{step:03d}.jsonl").read_bytes())
    other_rollouts = _loop(tmp_path, "other-rollouts", other, env)
    # the same rollouts and rubric, judged by another model
    result = invoke("replay", base, "--out", tmp_path / "other-judge", "--model", "judge-b", env=env)
    assert result.exit_code == 0, result.stderr
    again = tmp_path / "again"
    assert invoke("replay", base, "--out", again, "--offline").exit_code == 0

    assert _comparable(base, again) == {"0": True, "1": True}
    assert _comparable(base, other_rollouts)["0"] is False
    assert _comparable(base, tmp_path / "other-judge")["0"] is False
    shown = invoke("compare", base, other_rollouts, tmp_path / "other-judge")
    assert "rollouts differ" in shown.stderr
    shown = invoke("compare", base, tmp_path / "other-judge")
    assert "judges differ" in shown.stderr


def test_runs_whose_means_leave_out_other_failed_rollouts_are_not_comparable(tmp_path, sim, sim_factory) -> None:
    """Under --on-error skip (or neutral) a mean leaves out the rollouts the judge could not score: compare showed
    no failed count and said `yes` for two arms of the same rollouts, rubric and judge whose means were over different
    rollouts (13 of 16 in one, 16 in the other)."""
    faulty = sim_factory(agent_fault_rate={"scorer": 0.3})
    arms = {}
    for name, judge in (("faulty", faulty), ("clean", sim)):
        arms[name] = new_run(tmp_path, name)
        result = invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", arms[name], "--step", 0, "--on-error",
                        "skip", env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
    failed = sum(r["status"] == "failed" for r in scores(arms["faulty"]).values())
    assert 0 < failed < 16 and all(r["status"] == "scored" for r in scores(arms["clean"]).values())

    table = json.loads(invoke("compare", arms["faulty"], arms["clean"], "--json").stdout)
    assert table["comparable"] == {"0": False}
    assert table["why_not_comparable"] == {"0": f"{failed} rollout{'s' * (failed != 1)} failed in faulty, 0 in clean"}
    assert [run["failed"] for run in table["runs"]] == [{"0": failed}, {"0": 0}]
    assert [run["scored"] for run in table["runs"]] == [{"0": 16 - failed}, {"0": 16}]
    shown = " ".join(invoke("compare", arms["faulty"], arms["clean"]).stderr.split())
    assert f"({failed} failed)" in shown and f"no: {failed} rollout" in shown, shown
    # the same rollouts failed in both (a copy): the means are over the same rollouts, and the verdict says which
    twin = Path(shutil.copytree(arms["faulty"], tmp_path / "twin"))
    assert _comparable(arms["faulty"], twin) == {"0": True}
    shown = " ".join(invoke("compare", arms["faulty"], twin).stderr.split())
    assert f"yes: the same {failed} rollout" in shown and "failed in every run" in shown, shown
    alone = " ".join(invoke("compare", arms["faulty"]).stderr.split())  # one run: no other run to fail alike
    assert f"yes ({failed} rollout" in alone and "every run" not in alone, alone


def test_a_replay_interrupted_before_it_wrote_its_manifest_goes_on(tmp_path, sim) -> None:
    """The replay's directory got its copy of the first rubric before run.json: killed in between, the same command
    said `exists and is not empty` every time it was run again (an ablation sweep could not resume)."""
    run = _loop(tmp_path, "src", EXAMPLES / "math", judge_env(sim))
    half = tmp_path / "half"
    (half / "rubrics").mkdir(parents=True)
    shutil.copyfile(run / "rubrics" / "step-000000.json", half / "rubrics" / "step-000000.json")
    result = invoke("replay", run, "--out", half, "--offline")
    assert result.exit_code == 0, result.stderr
    assert snapshot(half / "steps") == snapshot(run / "steps")
    other = tmp_path / "other"
    (other / "rubrics").mkdir(parents=True)
    (other / "rubrics" / "notes.txt").write_text("keep")
    result = invoke("replay", run, "--out", other, "--offline")
    assert result.exit_code != 0 and "exists and is not empty" in result.stderr, result.stderr
    assert (other / "rubrics" / "notes.txt").read_text() == "keep"


def test_an_offline_miss_names_a_numbered_block_of_a_grouped_request() -> None:
    """The grouped scorer's blocks are numbered (RESPONSE_1, RESPONSE_2): the miss message's own copy of the block
    marker's pattern read only letters, and a difference in a response was named in no block."""
    from amaris_cli.llm.cache import _block_at, _untagged
    from amaris_cli.prompts import _block

    def request(answer: str, tag: str) -> str:
        return "\n".join(_block(label, text, tag) for label, text in (("PROMPT", "2+2?"), ("RESPONSE_1", "4"),
                                                                      ("RESPONSE_2", answer)))

    recorded, now = _untagged(request("five", "0" * 16)), _untagged(request("six", "1" * 16))
    at = next(i for i, (x, y) in enumerate(zip(recorded, now, strict=False)) if x != y)
    assert now[at:].startswith("six") and _block_at(now, at) == " (in block RESPONSE_2)"


def test_an_offline_replay_of_a_sim_judge_run_says_its_model_flag_is_not_used(tmp_path, sim) -> None:
    """`replay --offline --model X` of a sim-judge run looks up the sim-judge's recorded answers: the flag is not used,
    and nothing is sent anywhere (the online hint, `--judge endpoint sends the requests`, would not hold)."""
    src = new_run(tmp_path, "src")
    assert invoke("loop", EXAMPLES / "math", "--run", src, "--steps", "0:0", "--judge", "sim").exit_code == 0
    replayed = invoke("replay", src, "--out", tmp_path / "dst", "--offline", "--model", "gpt-judge-x")
    assert replayed.exit_code == 0, replayed.stderr
    said = " ".join(replayed.stderr.split())
    assert "--model not used: an offline replay looks up the sim-judge's recorded answers" in said, said
