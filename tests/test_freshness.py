"""Derived files know their inputs: a changed input makes what was derived from it be recomputed,
an unchanged one is reused without a model call; one failure policy in every command; exact numbers
to the agents; a replay never touches its source."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from statistics import fmean

import pytest

from amaris_cli.simjudge.server import SimJudge
from tests.conftest import (
    EXAMPLES,
    TEST_CONFIG,
    evolution,
    invoke,
    judge_env,
    new_run,
    read_json,
    read_jsonl,
    snapshot,
    steps_read,
    write_jsonl,
)


def step(run: Path, n: int) -> Path:
    return run / "steps" / f"{n:06d}"


def agent_requests(judge, agent: str) -> int:
    return judge.stats[f"agent:{agent}"]


def evolve_by_stages(run: Path, n: int, env: dict[str, str]) -> list:
    return [invoke(cmd, "--run", run, "--step", n, env=env) for cmd in ("analyze", "summarize", "update")]


def test_rescoring_a_step_makes_its_summary_stats_and_update_follow_the_new_scores(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    rows = read_jsonl(EXAMPLES / "math" / "step-000.jsonl")
    source = write_jsonl(tmp_path / "r.jsonl", rows)
    assert invoke("score", source, "--run", run, "--step", "0", env=env).exit_code == 0
    assert all(r.exit_code == 0 for r in evolve_by_stages(run, 0, env))
    old_summary = read_json(step(run, 0) / "summary.json")
    assert old_summary["n_rollouts"] == 16

    cut = write_jsonl(tmp_path / "cut.jsonl", rows[:4])
    updater_before = agent_requests(sim, "updater")
    result = invoke("score", cut, "--run", run, "--step", "0", "--force", env=env)
    assert result.exit_code == 0, result.stderr
    outputs = evolve_by_stages(run, 0, env)
    assert all(r.exit_code == 0 for r in outputs), [r.stderr for r in outputs]
    assert "1 done, 0 reused" in outputs[1].stderr, outputs[1].stderr

    summary = read_json(step(run, 0) / "summary.json")
    stats = read_json(step(run, 0) / "stats.json")
    scores = read_jsonl(step(run, 0) / "scores.jsonl")
    assert summary["n_rollouts"] == 4 and stats["n_rollouts"] == 4 and len(scores) == 4
    assert stats["mean_reward"] == pytest.approx(fmean(s["reward"] for s in scores), abs=1e-6)
    for criterion in stats["criteria"]:
        values = [v["score"] for s in scores for v in s["verdicts"] if v["criterion_id"] == criterion["criterion_id"]]
        assert criterion["mean"] == pytest.approx(fmean(values), abs=1e-6)
    assert summary["stats"] == stats
    assert agent_requests(sim, "updater") == updater_before + 1, "the updater is asked again"
    provenance = read_json(step(run, 0) / "provenance.json")["files"]
    assert provenance["update.json"]["inputs"]["summary"] == provenance["summary.json"]["sha256"]


def test_scoring_again_with_another_rubric_version_recomputes_what_follows(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=env).exit_code == 0
    before = read_json(step(run, 1) / "summary.json")
    assert read_jsonl(step(run, 1) / "scores.jsonl")[0]["rubric_version"] == 1
    result = invoke("score", EXAMPLES / "math" / "step-001.jsonl", "--run", run, "--step", "1", "--rubric-version", "0",
                    env=env)
    assert result.exit_code == 0, result.stderr
    # the rubric version 2 that the old evolution of step 1 wrote no longer counts for step 2
    stale = invoke("score", EXAMPLES / "math" / "step-002.jsonl", "--run", run, "--step", "2", env=env)
    assert stale.exit_code == 2 and f"--run {run} --step 1" in stale.stderr
    assert all(r.exit_code == 0 for r in evolve_by_stages(run, 1, env))
    after = read_json(step(run, 1) / "summary.json")
    assert read_jsonl(step(run, 1) / "scores.jsonl")[0]["rubric_version"] == 0
    assert after["stats"]["mean_reward"] != before["stats"]["mean_reward"]
    ids = {c["criterion_id"] for c in after["stats"]["criteria"]}
    assert ids == {c["id"] for c in read_json(run / "rubrics" / "step-000000.json")["adaptive"]} | {"correct-answer"}


def test_an_unchanged_stage_is_reused_without_a_model_call_and_a_changed_setting_recomputes(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=env).exit_code == 0
    requests = sim.stats["requests"]
    again = evolve_by_stages(run, 0, env)
    assert all(r.exit_code == 0 for r in again)
    assert sim.stats["requests"] == requests
    assert "0 done, 1 reused" in again[1].stderr
    # A setting the summary depends on: the summary is recomputed, the analyses are not.
    result = invoke("summarize", "--run", run, "--step", "0", "--chunk-size", "4", env=env)
    assert result.exit_code == 0 and "1 done, 0 reused" in result.stderr
    assert read_json(step(run, 0) / "summary.json")["chunks"] == 4
    assert agent_requests(sim, "analyzer") == 16


def test_a_summary_in_many_chunks_rewrites_provenance_once_for_them_all(tmp_path, sim, monkeypatch) -> None:
    """provenance.json holds every file of the step, so a rewrite per chunk file was quadratic in the chunks
    (313 of them at 10,000 rollouts). The chunks are recorded together, each with its own bytes' SHA-256."""
    import hashlib

    from amaris_cli import artifacts

    env = judge_env(sim)
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=env).exit_code == 0
    saves: list[int] = []
    save = artifacts._save
    monkeypatch.setattr(artifacts, "_save", lambda run_, step_, provenance, **kw: (saves.append(step_), save(run_, step_, provenance, **kw)))
    result = invoke("summarize", "--run", run, "--step", "0", "--chunk-size", "2", env=env)
    assert result.exit_code == 0, result.stderr
    assert read_json(step(run, 0) / "summary.json")["chunks"] == 8
    assert len(saves) <= 3, f"{len(saves)} rewrites of provenance.json: one for the chunks, the summary, the stats"
    files = read_json(step(run, 0) / "provenance.json")["files"]
    chunks = sorted(step(run, 0).glob("summary.chunk-*.json"))
    assert len(chunks) == 8
    summary_inputs = files["summary.json"]["inputs"]
    for chunk in chunks:
        assert files[chunk.name]["sha256"] == hashlib.sha256(chunk.read_bytes()).hexdigest()
        assert files[chunk.name]["inputs"] == summary_inputs


def test_a_loop_does_not_summarize_a_step_whose_analyses_failed_under_fail(tmp_path, sim_factory) -> None:
    judge = sim_factory(agent_fault_rate={"analyzer": 0.5}, seed=3)
    run = new_run(tmp_path)
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(judge))
    assert result.exit_code == 4, result.stderr
    analyses = read_jsonl(step(run, 0) / "analyses.jsonl")
    failed = sum(a["status"] == "failed" for a in analyses)
    assert 0 < failed < len(analyses), "some analyses fail and some do not"
    assert f"{failed} of 16 rollouts could not be analyzed" in result.stderr
    assert not (step(run, 0) / "summary.json").exists()
    assert not (run / "rubrics" / "step-000001.json").exists()
    assert not step(run, 1).exists()
    # the same under skip: the step goes on with the analyses that worked
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", "--on-error", "skip",
                    env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert read_json(step(run, 0) / "summary.json")["n_analyzed"] < 16


def test_the_neutral_reward_reaches_the_trainer(tmp_path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "wrong_shape"})
    run = new_run(tmp_path)
    rows = [{"id": f"r{i}", "input": "What is 2+2?", "output": "4", "answer": "4"} for i in range(3)]
    source = write_jsonl(tmp_path / "r.jsonl", rows)
    result = invoke("score", source, "--run", run, "--step", "0", "--on-error", "neutral", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    exported = [json.loads(line) for line in invoke("rewards", "--run", run, "--step", "0").stdout.splitlines()]
    assert exported == [{"id": f"r{i}", "reward": 0.5, "status": "failed"} for i in range(3)]
    assert json.loads(invoke("rewards", "--run", run, "--step", "0", "--format", "list").stdout) == [0.5] * 3


def test_rewards_that_are_not_there_say_which_command_writes_them_or_which_steps_exist(tmp_path, sim) -> None:
    """`rewards --step 9` of a two-step run and `--rescored` of a step evolved without --rescore both said "has no
    complete ... (is the stage finished?)"."""
    run = new_run(tmp_path)
    source = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "input": "2+2?", "output": "4", "answer": "4"}])
    for step in ("0", "1"):
        assert invoke("score", source, "--run", run, "--step", step, "--rubric-version", "0",
                      env=judge_env(sim)).exit_code == 0
    missing = invoke("rewards", "--run", run, "--step", "9")
    assert missing.exit_code == 2 and "step 9 does not exist; the run has steps 0-1" in missing.stderr, missing.stderr
    rescored = invoke("rewards", "--run", run, "--step", "1", "--rescored")
    assert rescored.exit_code == 2
    assert f"`amaris evolve --run {run} --step 1 --rescore` writes it" in " ".join(rescored.stderr.split())


def test_the_config_failure_policy_applies_without_a_flag(tmp_path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "wrong_shape"})
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG.replace("[pipeline]\nchunk_size = 8", "[pipeline]\nchunk_size = 8\non_error = \"skip\""))
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    source = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "input": "2+2?", "output": "4", "answer": "4"}])
    assert invoke("score", source, "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 0
    assert invoke("score", source, "--run", run, "--step", "0", "--on-error", "fail", env=judge_env(judge)).exit_code == 4


def test_a_replay_leaves_its_source_byte_for_byte_and_offline_needs_no_endpoint(tmp_path, sim) -> None:
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    with open(run / "calls.jsonl", "ab") as fh:
        fh.write(b'{"agent": "scorer", "torn')  # a writer killed mid-line
    before = snapshot(run)
    result = invoke("replay", run, "--out", tmp_path / "offline", "--offline", "--json")  # no endpoint at all
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["calls_made"] == 0
    assert snapshot(run) == before, "the source is only read, its torn line included"
    ablation = invoke("replay", run, "--out", tmp_path / "nodyn", "--no-dynamic", "--offline")
    assert ablation.exit_code == 5 and "is not in" in ablation.stderr and "updater" in ablation.stderr
    assert not (tmp_path / "nodyn").exists()
    assert snapshot(run) == before


def test_a_run_the_built_in_sim_judge_made_replays_offline(tmp_path) -> None:
    """`loop --judge sim` records the sim-judge's requests (its model is "sim-judge"); an offline replay, which
    starts no judge, looked them up under the config's model instead and missed every one (exit 5)."""
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", "--judge", "sim").exit_code == 0
    result = invoke("replay", run, "--out", tmp_path / "offline", "--offline", "--json")  # the recorded judge: sim
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["calls_made"] == 0
    for name in ("steps/000000/scores.jsonl", "steps/000001/scores.jsonl", "rubrics/step-000001.json"):
        assert (tmp_path / "offline" / name).read_bytes() == (run / name).read_bytes(), name


def test_inspect_and_compare_count_only_calls_made_as_spent(tmp_path, sim) -> None:
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    assert invoke("replay", run, "--out", tmp_path / "replayed", "--offline").exit_code == 0
    table = json.loads(invoke("compare", run, tmp_path / "replayed", "--json").stdout)
    source, replayed = table["runs"]
    assert source["calls_made"] > 0 and source["tokens"] > 0
    assert replayed["calls_made"] == 0 and replayed["tokens"] == 0 and replayed["calls_reused"] == source["calls_made"]
    assert table["comparable"] == {"0": True, "1": True}
    inspected = json.loads(invoke("inspect", tmp_path / "replayed", "--json").stdout)
    assert inspected["totals"]["prompt_tokens"] == 0 and inspected["totals"]["completion_tokens"] == 0


def test_compare_marks_steps_whose_arms_were_scored_with_different_rubrics(tmp_path, sim) -> None:
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:2", env=judge_env(sim)).exit_code == 0
    frozen = new_run(tmp_path, "frozen")
    for n in range(4):  # step 3 only in this run
        assert invoke("score", EXAMPLES / "math" / f"step-{n:03d}.jsonl", "--run", frozen, "--step", n,
                      "--rubric-version", "0", env=judge_env(sim)).exit_code == 0
    table = json.loads(invoke("compare", run, frozen, "--json").stdout)
    assert table["comparable"]["0"] is True
    assert table["comparable"]["1"] is False and table["comparable"]["2"] is False and table["comparable"]["3"] is False
    printed = invoke("compare", run, frozen).stderr
    rows = {line.split()[0]: line for line in printed.splitlines() if re.match(r"\s*\d+\s", line)}
    assert rows["0"].rstrip().endswith("yes") and rows["2"].rstrip().endswith("no: rubrics differ"), printed
    assert rows["3"].rstrip().endswith("no: not in every run"), printed  # was "rubrics differ", of a step one run lacks


def test_compare_reads_each_rubric_once_not_once_per_rollout(tmp_path, sim, monkeypatch) -> None:
    """`compare` keys a step's rewards by the rubrics that scored it, and loaded the rubric of every score record:
    a run of 300 steps of 32 rollouts parsed 9,600 rubric files, half the command's time. The loads must not grow
    with the rollouts: a rubric is read once for the keys, and once more at most for the stability figures."""
    from amaris_cli.compare import compare_runs
    from amaris_cli.rundir import RunDir

    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    loads: dict[int, int] = {}
    load_rubric = RunDir.load_rubric

    def counted(self: RunDir, version: int, instance_id: str | None = None):
        loads[version] = loads.get(version, 0) + 1
        return load_rubric(self, version, instance_id)

    monkeypatch.setattr(RunDir, "load_rubric", counted)
    compare_runs([RunDir(run)])
    assert loads and max(loads.values()) <= 2, loads  # was 16 for each version: one per rollout it scored


def test_compare_reads_each_steps_provenance_once(tmp_path, sim, monkeypatch) -> None:
    """`compare` read a step's provenance.json twice (for the rollouts' hash and the judge, then for what is stale):
    in a per-instance run it names every instance's files, 4-5 ms to parse at 64 instances a step."""
    from amaris_cli import artifacts
    from amaris_cli.compare import compare_runs
    from amaris_cli.rundir import RunDir

    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    read = steps_read(monkeypatch, artifacts, "read_provenance")
    compare_runs([RunDir(run)])
    assert read == [0, 1], read


def test_summarizer_and_updater_get_amaris_counts_and_are_not_asked_to_estimate(tmp_path, sim) -> None:
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    summary = read_json(step(run, 0) / "summary.json")
    analyses = read_jsonl(step(run, 0) / "analyses.jsonl")
    by_hand: dict[str, int] = {}
    for a in analyses:
        for name in {p["pattern"] for p in a["analysis"]["reward_hacking"]["patterns"]}:
            by_hand[name] = by_hand.get(name, 0) + 1
    assert {h["pattern"]: h["count"] for h in summary["hacking"]} == by_hand
    calls = read_jsonl(run / "calls.jsonl")
    for agent in ("summarizer", "meta_summarizer", "query_generator", "updater"):
        call = next(c for c in calls if c["agent"] == agent)
        system, user = call["messages"][0]["content"], call["messages"][1]["content"]
        assert "prevalence" not in system, f"{agent} is asked to estimate a prevalence"
        if agent != "summarizer":  # a chunk gets its own chunk's counts
            for name, count in by_hand.items():
                assert f"{name}: {count} of 16 analyzed rollouts" in user, agent
    updater = next(c for c in calls if c["agent"] == "updater")["messages"][1]["content"]
    assert json.dumps(summary["stats"]["criteria"][0], sort_keys=True, separators=(",", ":")) in updater


# --- red team -----------------------------------------------------------------------------------------------
# A stage must never build on an upstream file that is itself out of date.
#
# Each scenario is a run that a user can reach with ordinary commands, where a stage used to write a result
# that looks valid but describes other data: a summary of the analyses of the rollouts a step held before
# `score --force`, an update of the old summary (and the evolution marked done), analyses and statistics of
# scores judged against a rubric that has since been edited.


@pytest.fixture(scope="module")
def evolved(tmp_path_factory: pytest.TempPathFactory, judge: SimJudge) -> Path:
    """Step 0 scored and evolved (analyses, summary, update, rubric version 1)."""
    run = new_run(tmp_path_factory.mktemp("evolved"))
    env = judge_env(judge)
    for args in (("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0), ("evolve", "--run", run, "--step", 0)):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.stderr
    return run


@pytest.fixture
def run(evolved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(evolved, copy)
    return copy


def other_rollouts(tmp_path: Path) -> Path:
    """Step 1's rollouts under step 0's ids: a `score --force` that keeps the ids and changes the content."""
    ids = [row["id"] for row in read_jsonl(EXAMPLES / "math/step-000.jsonl")]
    rows = [{**row, "id": i, "step": 0} for i, row in zip(ids, read_jsonl(EXAMPLES / "math/step-001.jsonl"), strict=True)]
    return write_jsonl(tmp_path / "other.jsonl", rows)


def rescore(run: Path, tmp_path: Path, env: dict[str, str]) -> None:
    result = invoke("score", other_rollouts(tmp_path), "--run", run, "--step", 0, "--force", env=env)
    assert result.exit_code == 0, result.stderr


def test_update_right_after_a_rescore_does_not_reuse_the_update_of_the_old_scores(run, tmp_path, judge) -> None:
    env = judge_env(judge)
    step0 = run / "steps/000000"
    old_update, old_rubric = (step0 / "update.json").read_bytes(), (run / "rubrics/step-000001.json").read_bytes()
    rescore(run, tmp_path, env)
    result = invoke("update", "--run", run, "--step", 0, env=env)
    # The summary describes the rollouts the step held before: updating from it is a stale result.
    assert result.exit_code == 2, result.stderr
    assert "summary.json" in result.stderr and "amaris summarize" in result.stderr, result.stderr
    assert (step0 / "update.json").read_bytes() == old_update
    assert (run / "rubrics/step-000001.json").read_bytes() == old_rubric
    assert evolution(run) is None, "an update of stale inputs must not mark the evolution done"


def test_summarize_right_after_a_rescore_does_not_summarize_the_old_analyses(run, tmp_path, judge) -> None:
    env = judge_env(judge)
    step0 = run / "steps/000000"
    old_summary = (step0 / "summary.json").read_bytes()
    rescore(run, tmp_path, env)
    result = invoke("summarize", "--run", run, "--step", 0, env=env)
    assert result.exit_code == 2, result.stderr
    assert "analyses.jsonl" in result.stderr and "amaris analyze" in result.stderr, result.stderr
    assert (step0 / "summary.json").read_bytes() == old_summary
    # the way out works: analyze, then summarize, now from the new analyses
    for cmd in ("analyze", "summarize"):
        done = invoke(cmd, "--run", run, "--step", 0, env=env)
        assert done.exit_code == 0, done.stderr
    analyses = {a["rollout_id"]: a for a in read_jsonl(step0 / "analyses.jsonl")}
    scores = {s["rollout_id"]: s for s in read_jsonl(step0 / "scores.jsonl")}
    assert all(analyses[i]["reward"] == pytest.approx(scores[i]["reward"], abs=1e-6) for i in scores)


def test_a_rubric_edited_after_scoring_makes_the_scores_stale_not_the_base_of_an_evolution(run, judge) -> None:
    env = judge_env(judge)
    step0 = run / "steps/000000"
    (run / "steps/000000/analyses.jsonl").unlink()  # as if the step had only been scored
    rubric_path = run / "rubrics/step-000000.json"
    rubric = json.loads(rubric_path.read_text())
    rubric["adaptive"] = [{"id": "is-concise", "kind": "reward", "text": "The response is concise.", "weight": 3.0}]
    rubric_path.write_text(json.dumps(rubric))

    stale = json.loads(invoke("inspect", run, "--step", 0, "--json").stdout)["detail"]["stale"]
    assert "scores.jsonl" in stale, stale
    result = invoke("evolve", "--run", run, "--step", 0, env=env)
    # The verdicts were given against criteria the rubric no longer has: analyzing them against the
    # edited rubric would describe a judgement that never happened (stats with n = 0 for "is-concise").
    assert result.exit_code == 2, result.stderr
    assert "scores.jsonl" in result.stderr and "amaris score" in result.stderr, result.stderr
    assert not (step0 / "analyses.jsonl").exists()

    again = invoke("score", EXAMPLES / "math/step-000.jsonl", "--run", run, "--step", 0, env=env)
    assert again.exit_code == 0, again.stderr
    evolved = invoke("evolve", "--run", run, "--step", 0, env=env)
    assert evolved.exit_code == 0, evolved.stderr
    stats = json.loads((step0 / "stats.json").read_text())
    assert {c["criterion_id"]: c["n"] for c in stats["criteria"]} == {"correct-answer": 16, "is-concise": 16}


def test_a_step_scored_again_with_an_edited_rubric_is_evolved_again_even_when_its_records_are_the_same(
        tmp_path, sim) -> None:
    """The rubric that scored an evolved step is edited by hand in words the judge's verdicts do not change, and the
    step is scored again, as its stale scores ask: the same records, byte for byte. Its analyses, summary and update
    read the rubric as it was (the update wrote the next version from it), so the evolution is not complete any more:
    keeping its mark let step 1 be scored with the version the stale update wrote, without a word."""
    from tests.conftest import new_scenario_run

    env = judge_env(sim)
    run = new_scenario_run(tmp_path)
    rollouts = EXAMPLES / "math" / "step-000.jsonl"
    assert invoke("score", rollouts, "--run", run, "--step", "0", env=env).exit_code == 0
    evolved = invoke("evolve", "--run", run, "--step", "0", env=env)
    assert evolved.exit_code == 0, evolved.stderr
    assert evolution(run, 0)["status"] == "done"
    scores = (step(run, 0) / "scores.jsonl").read_bytes()
    rubric = run / "rubrics" / "step-000000.json"
    edited = read_json(rubric)
    [reasoning] = [c for c in edited["adaptive"] if c["id"] == "shows-reasoning"]
    reasoning["text"] = "The response explains its reasoning, one step after another."  # the same verdicts
    rubric.write_text(json.dumps(edited, indent=2))
    rescored = invoke("score", rollouts, "--run", run, "--step", "0", env=env)
    assert rescored.exit_code == 0, rescored.stderr
    assert (step(run, 0) / "scores.jsonl").read_bytes() == scores  # the same records
    assert evolution(run, 0) is None
    later = invoke("score", EXAMPLES / "math" / "step-001.jsonl", "--run", run, "--step", "1", "--lag", "0", env=env)
    assert later.exit_code == 2 and f"amaris evolve --run {run} --step 0" in " ".join(later.stderr.split()), later.stderr


def test_a_file_an_earlier_command_hashed_is_not_read_again_until_it_changes(tmp_path, sim, monkeypatch) -> None:
    """Telling a stale step file hashed every file of every step at every `inspect` (1.5 s of 2.7 s at 240
    instances). A hash is remembered with the file's status between commands; a file changed since is hashed again,
    even when its size and mtime are the same, and a file too young for its status to tell is not remembered."""
    import os
    import time

    from amaris_cli import artifacts, filehashes

    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    memo = tmp_path / "memo"
    monkeypatch.setenv("AMARIS_CACHE_DIR", str(memo))
    hashed: list[str] = []

    def counted(path: Path) -> str | None:
        hashed.append(os.path.relpath(path, run))
        return filehashes.hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None

    monkeypatch.setattr(filehashes, "file_sha256", counted)
    monkeypatch.setattr(artifacts, "file_sha256", counted)

    def command(*args: object) -> str:
        filehashes.save_all()  # as at the end of a process: the next command is another one
        monkeypatch.setattr(filehashes, "_runs", {})
        hashed.clear()
        result = invoke("inspect", run, *args, "--json")
        assert result.exit_code == 0, result.output
        return result.stdout

    monkeypatch.setattr(filehashes, "RACY_NS", 600 * 10**9)
    first = command()  # files younger than RACY_NS are hashed and not remembered
    filehashes.save_all()
    assert "steps/000001/scores.jsonl" in hashed and not list(memo.glob("file-hashes-*"))
    monkeypatch.setattr(filehashes, "RACY_NS", 50_000_000)
    time.sleep(0.1)
    assert command() == first and "steps/000001/scores.jsonl" in hashed
    assert command() == first and hashed == []
    # An edit that keeps the size and puts the mtime back: the status still differs (ctime), so it is hashed again.
    scores = step(run, 1) / "scores.jsonl"
    stat, data = scores.stat(), scores.read_bytes()
    edit = data.replace(b'"reason":"f', b'"reason":"F', 1)  # a reason edited
    assert edit != data
    scores.write_bytes(edit)
    os.utime(scores, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert scores.stat().st_size == stat.st_size and scores.stat().st_mtime_ns == stat.st_mtime_ns
    edited = json.loads(invoke("inspect", run, "--step", "1", "--json").stdout)  # the same process: its memo
    assert "steps/000001/scores.jsonl" in hashed and "scores.jsonl" in edited["detail"]["stale"]
    assert [s["state"] for s in edited["steps"]] == [json.loads(first)["steps"][0]["state"], "stale"]


def test_the_stale_check_finds_each_rubric_file_once_a_step(tmp_path, sim, monkeypatch) -> None:
    """Every file of a step names the rubrics it was made with (in a per-instance run every instance's files name its
    own), and the stale check found the rubric's file again for each: 78,000 paths for 8 steps of 240 instances."""
    from amaris_cli import artifacts
    from amaris_cli.rundir import RunDir

    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    provenance = artifacts.read_provenance(RunDir(run), 0)
    named = [key for made in provenance.files.values() for inputs in artifacts.RUBRIC_INPUTS
             if isinstance(made.inputs.get(inputs), dict) for key in made.inputs[inputs]]
    found = steps_read(monkeypatch, artifacts, "rubric_sha256")  # (run, version, ...): the versions looked for
    assert artifacts.stale_files(RunDir(run), 0) == []
    assert len(named) > len(set(named)) and len(found) == len(set(named)), (named, found)


def test_a_run_on_sshfs_is_hashed_at_every_command_as_its_status_can_stay_the_same_over_an_edit(
        tmp_path, sim, monkeypatch) -> None:
    """sshfs reports a file's mtime as its ctime, so `touch -d` after an edit of the same size puts its whole status
    back: the memo served the hash of the old bytes and an edited scores file was shown current."""
    import os
    import time

    from amaris_cli import filehashes

    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    monkeypatch.setenv("AMARIS_CACHE_DIR", str(tmp_path / "memo"))
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
                         f"90 22 0:77 / {str(run).replace(' ', chr(92) + '040')} rw - fuse.sshfs host:/runs/run rw\n")
    monkeypatch.setattr(filehashes, "MOUNTINFO", str(mountinfo), raising=False)
    status_of = filehashes.file_status

    def as_sshfs(path: Path) -> filehashes.Status | None:
        status = status_of(path)
        return None if status is None else (*status[:4], status[3])  # its ctime is its mtime

    monkeypatch.setattr(filehashes, "file_status", as_sshfs)
    monkeypatch.setattr(filehashes, "RACY_NS", 50_000_000)
    time.sleep(0.1)

    def inspect() -> dict:
        filehashes.save_all()  # as at the end of a process: the next command is another one
        monkeypatch.setattr(filehashes, "_runs", {})
        result = invoke("inspect", run, "--step", "1", "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    first = inspect()
    assert inspect() == first and first["detail"]["stale"] == []
    scores = step(run, 1) / "scores.jsonl"
    stat, data = scores.stat(), scores.read_bytes()
    edit = data.replace(b'"reason":"f', b'"reason":"F', 1)
    assert edit != data
    scores.write_bytes(edit)  # in place, as an editor or `cp -p` writes it
    os.utime(scores, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # touch -d
    assert as_sshfs(scores) == (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_mtime_ns)
    assert "scores.jsonl" in inspect()["detail"]["stale"]


def test_a_held_steps_records_reach_the_file_with_its_evolution_mark_and_when_the_hold_ends(
        tmp_path, monkeypatch) -> None:
    """While a writer holds a step its provenance waits in memory; what other processes wait for (the evolution's
    mark) is written at once with every record before it, and the rest when the hold ends, also by an exception."""
    from amaris_cli import artifacts
    from amaris_cli.rundir import RunDir

    monkeypatch.setattr(artifacts, "PROVENANCE_FLUSH_SECONDS", 3600.0)
    run = RunDir(tmp_path / "run")
    run.step_dir(0).mkdir(parents=True)
    on_disk = lambda: read_json(artifacts.provenance_path(run, 0)) if artifacts.provenance_path(run, 0).exists() else {}  # noqa: E731
    with artifacts.held(run, 0):
        artifacts.write_json_recorded(run, 0, "stats.json", {"a": 1}, {"x": 1})
        with artifacts.held(run, 0):  # a second hold of the same step (nested) ends with the first
            artifacts.write_json_recorded(run, 0, "summary.json", {"b": 2}, {"x": 2})
        assert on_disk() == {}
        assert set(artifacts.read_provenance(run, 0).files) == {"stats.json", "summary.json"}  # this process sees them
        artifacts.mark_evolved(run, 0, artifacts.Evolution(status="done"))
        assert set(on_disk()["files"]) == {"stats.json", "summary.json"} and on_disk()["evolution"]["status"] == "done"
        artifacts.write_json_recorded(run, 0, "update.json", {"c": 3}, {"x": 3})
        assert "update.json" not in on_disk()["files"]
    assert "update.json" in on_disk()["files"]
    with pytest.raises(KeyboardInterrupt), artifacts.held(run, 0):
        artifacts.remove(run, 0, "stats.json")
        raise KeyboardInterrupt
    assert set(on_disk()["files"]) == {"summary.json", "update.json"}
    assert artifacts.stale_files(run, 0) == []
    assert artifacts._HELD == {}
