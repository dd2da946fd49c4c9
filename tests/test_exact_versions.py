"""Exact rubric versions, always (issue 24): a step is never scored with a version that a pending earlier
evolution will supersede, in either order of arrival, unless the version is asked for (`--rubric-version V`),
which the run records and a replay reproduces.

Each test builds a run with the real CLI against the sim-judge; the steps are the example steps cut to
four rollouts, so a step costs a few dozen sim-judge calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from amaris_cli.rundir import RunDir
from amaris_cli.schedule import NotEvolved, OutOfOrder, scoring_version
from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env, new_run, outputs, read_jsonl, write_jsonl
from tests.served import served

ROWS = 4


def step_file(tmp: Path, step: int, source: int | None = None) -> Path:
    """Step `step`'s rollouts: the first rows of example step `source` (default: step mod 6)."""
    path = tmp / "inputs" / f"step-{step:03d}.jsonl"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        rows = read_jsonl(EXAMPLES / "math" / f"step-{(step if source is None else source) % 6:03d}.jsonl")[:ROWS]
        write_jsonl(path, [{**r, "step": step} for r in rows])
    return path


def score(run: Path, tmp: Path, step: int, env: dict[str, str], *extra: object, code: int = 0):
    result = invoke("score", step_file(tmp, step), "--run", run, "--step", step, "--json", *extra, env=env)
    assert result.exit_code == code, result.stderr
    return result


def evolve(run: Path, step: int, env: dict[str, str], *extra: object) -> None:
    result = invoke("evolve", "--run", run, "--step", step, "--wait", 30, *extra, env=env)
    assert result.exit_code == 0, result.stderr


def versions(run: Path, step: int) -> set[int]:
    return {r["rubric_version"] for r in read_jsonl(run / "steps" / f"{step:06d}" / "scores.jsonl")}


def message(result) -> str:
    return " ".join(result.stderr.split())


def run_with(tmp: Path, name: str, setting: str) -> Path:
    """A run from the test config with one more `[pipeline]` setting."""
    config = tmp / f"{name}.toml"
    config.write_text(TEST_CONFIG.replace("[pipeline]\n", f"[pipeline]\n{setting}\n"))
    run = tmp / name
    assert invoke("init", run, "--config", config).exit_code == 0
    return run


def in_order(run: Path, tmp: Path, steps: range, env: dict[str, str], lag: int = 1) -> None:
    for step in steps:
        score(run, tmp, step, env, "--lag", lag)
        evolve(run, step, env)


def test_a_later_step_scored_before_the_step_that_decides_its_version_is_refused_naming_it(tmp_path, sim) -> None:
    """The issue's case: step 5 with --lag 1 while steps 3 and 4 do not exist took the newest version there
    was; the evolution of step 3 then wrote version 4, the one step 5 is scored with."""
    env = judge_env(sim)
    run = new_run(tmp_path)
    in_order(run, tmp_path, range(3), env)
    before = outputs(run)
    refused = score(run, tmp_path, 5, env, "--lag", 1, code=2)
    text = message(refused)
    assert "scoring step 5 with --lag 1" in text and "step 3 has no rollouts" in text
    assert f"amaris score ROLLOUTS.jsonl --run {run} --step 3" in text and f"amaris evolve --run {run} --step 3" in text
    assert "--rubric-version 3" in text, "the explicit form, with the version there is now"
    assert outputs(run) == before, "a refused step writes nothing"
    # Lag 2 needs only steps 0-2: step 5 is scored with version 3, which the evolution of step 2 wrote.
    assert json.loads(score(run, tmp_path, 5, env, "--lag", 2).stdout)["rubric_version"] == 3


def test_the_explicit_version_is_recorded_and_a_replay_of_the_out_of_order_run_reproduces_it(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    in_order(run, tmp_path, range(3), env)
    scored = score(run, tmp_path, 5, env, "--lag", 1, "--rubric-version", 3)
    assert json.loads(scored.stdout)["rubric_version"] == 3 and versions(run, 5) == {3}
    provenance = json.loads((run / "steps/000005/provenance.json").read_text())
    assert provenance["files"]["scores.jsonl"]["inputs"]["rubric_version"] == 3
    in_order(run, tmp_path, range(3, 5), env)  # the evolution of step 3 writes version 4 now
    evolve(run, 5, env)
    assert (run / "rubrics/step-000004.json").exists() and versions(run, 5) == {3}
    requests = sim.stats["requests"]
    replayed = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", "--json")
    assert replayed.exit_code == 0, replayed.stderr
    assert sim.stats["requests"] == requests and json.loads(replayed.stdout)["calls_made"] == 0
    assert outputs(tmp_path / "replayed") == outputs(run)


def test_an_earlier_step_after_later_ones_whose_version_or_evolution_it_would_change_is_refused(tmp_path, sim) -> None:
    """A run whose first step is 100 is normal; a step before it is refused once a later step was scored
    with a version its evolution would supersede, or was evolved without it."""
    env = judge_env(sim)
    run = new_run(tmp_path)
    for step in (100, 101):
        assert json.loads(score(run, tmp_path, step, env, "--lag", 1).stdout)["rubric_version"] == 0
    before = outputs(run)
    refused = score(run, tmp_path, 99, env, "--lag", 1, code=2)
    text = message(refused)
    assert "step 99 cannot be added before the later steps" in text
    assert "step 101 was scored with --lag 1 and rubric version 0, but version 100" in text
    assert "step 100 was" not in text, "step 100 (lag 1: versions <= 99) is not changed by step 99's evolution"
    assert "score those steps again with the version each was given, asked for (`--rubric-version V`" in text
    assert outputs(run) == before
    # Made explicit (the rewards the trainer got stay what they were), step 101 no longer stands in the way.
    score(run, tmp_path, 101, env, "--rubric-version", 0)
    assert json.loads(score(run, tmp_path, 99, env, "--lag", 1).stdout)["rubric_version"] == 0
    # The evolution of step 100 now waits for step 99's: evolutions follow the steps, not their arrival.
    in_order(run, tmp_path, range(99, 101), env)
    assert json.loads((run / "steps/000100/update.json").read_text())["from_version"] == 100
    evolve(run, 101, env)
    # An evolved later step: nothing may be added before it any more.
    refused = score(run, tmp_path, 98, env, "--lag", 1, code=2)
    assert "step 99 was evolved without it" in message(refused) and "--rubric-version" not in message(refused)


def test_an_evolution_waits_for_an_earlier_step_that_is_not_there_yet(tmp_path, sim) -> None:
    """Evolutions follow the steps: `evolve` (started with `&` in any order) waits for a missing earlier step,
    saying which and how to make it; `update` refuses."""
    env = judge_env(sim)
    run = new_run(tmp_path)
    in_order(run, tmp_path, range(2), env)
    score(run, tmp_path, 3, env, "--rubric-version", 2)
    waited = invoke("evolve", "--run", run, "--step", 3, "--wait", 0.5, env=env)
    assert waited.exit_code == 3, waited.stderr
    text = message(waited)
    assert "the evolution of step 3: waiting for step 2, which has no rollouts yet" in text
    assert "gave up after 0.5s" in text and "step 2 to be scored and evolved" in text
    refused = invoke("update", "--run", run, "--step", 3, env=env)
    assert refused.exit_code == 2 and "step 2 has no rollouts" in message(refused), refused.stderr
    in_order(run, tmp_path, range(2, 3), env)
    evolve(run, 3, env)
    assert json.loads((run / "steps/000003/update.json").read_text())["from_version"] == 3


def test_a_run_that_starts_late_scores_by_its_own_first_step(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    assert json.loads(score(run, tmp_path, 100, env, "--lag", 1).stdout)["rubric_version"] == 0
    evolve(run, 100, env)
    assert json.loads(score(run, tmp_path, 101, env, "--lag", 1).stdout)["rubric_version"] == 0
    evolve(run, 101, env)
    assert json.loads(score(run, tmp_path, 102, env, "--lag", 1).stdout)["rubric_version"] == 101


def test_update_every_does_not_relax_the_rule(tmp_path, sim) -> None:
    """With update_every 2, step 4 of a run from 0 does not update by default, but `evolve --update` can make
    it write version 5: step 6 with --lag 1 waits for it as for any other step."""
    env = judge_env(sim)
    run = run_with(tmp_path, "every", "update_every = 2")
    in_order(run, tmp_path, range(4), env)
    assert sorted(p.name for p in (run / "rubrics").glob("step-*.json")) == ["step-000000.json", "step-000002.json",
                                                                            "step-000004.json"]
    refused = score(run, tmp_path, 6, env, "--lag", 1, code=2)
    assert "step 4 has no rollouts" in message(refused) and "step 5" not in message(refused)
    score(run, tmp_path, 4, env, "--lag", 1)
    evolve(run, 4, env, "--update")
    assert json.loads(score(run, tmp_path, 6, env, "--lag", 1).stdout)["rubric_version"] == 5


def test_per_instance_runs_follow_the_same_rule(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = run_with(tmp_path, "inst", "per_instance = true")
    in_order(run, tmp_path, range(2), env)
    assert list((run / "rubrics/instances").glob("*/step-000002.json")), "the instances' version 2"
    step_file(tmp_path, 4, source=1)  # the instances of step 1, whose evolution wrote their version 2
    refused = score(run, tmp_path, 4, env, "--lag", 1, code=2)
    assert "step 2 has no rollouts" in message(refused)
    # The instances' version 2 (the run's own rubric stays at version 0) is a version that can be asked for.
    assert json.loads(score(run, tmp_path, 4, env, "--rubric-version", 2).stdout)["rubric_version"] == 2


def test_a_loop_over_steps_after_a_gap_stops_before_scoring_them(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    source = tmp_path / "loop-input"
    source.mkdir()
    for step in range(6):
        (source / f"step-{step:03d}.jsonl").write_bytes(step_file(tmp_path, step).read_bytes())
    assert invoke("loop", source, "--run", run, "--steps", "0:1", "--lag", 1, env=env).exit_code == 0
    before = outputs(run)
    refused = invoke("loop", source, "--run", run, "--steps", "4:5", "--lag", 1, env=env)
    assert refused.exit_code == 2, refused.stderr
    assert "step 2 has no rollouts" in message(refused) and "--steps 2:2" in message(refused)
    assert outputs(run) == before
    assert invoke("loop", source, "--run", run, "--steps", "2:5", "--lag", 1, env=env).exit_code == 0
    assert versions(run, 5) == {4}


def test_serve_answers_a_step_out_of_order_with_a_409_naming_the_steps(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    in_order(run, tmp_path, range(2), env)

    def posted(http: httpx.Client, step: int) -> httpx.Response:
        row = read_jsonl(step_file(tmp_path, step))[0]
        return http.post("/score", json={"prompt": row["input"], "response": row["output"], "id": row["id"],
                                         "reference": row["supplemental_context"],
                                         "metadata": {"current_step": step}}, timeout=60)

    with served(run, sim) as server, httpx.Client(base_url=server.url) as http:
        early = posted(http, 4)  # async: lag 1, versions <= 3, decided by the evolutions of steps 0-2
        assert early.status_code == 409 and "step 2 has no rollouts" in early.json()["error"], early.text
        assert not (run / "steps/000004").exists() and not list((run / ".serve").glob("*"))
        answer = posted(http, 2)
        assert answer.status_code == 200 and answer.json()["rubric_version"] == 1, answer.text
    # The other order: a step before the run's first one, after a later step was scored without it.
    late_run = new_run(tmp_path, "late")
    score(late_run, tmp_path, 100, env, "--lag", 1)
    score(late_run, tmp_path, 101, env, "--lag", 1)
    with served(late_run, sim) as server, httpx.Client(base_url=server.url) as http:
        before = posted(http, 99)
        assert before.status_code == 409, before.text
        assert "step 101 was scored with --lag 1 and rubric version 0" in before.json()["error"]


def test_a_served_step_out_of_order_is_told_what_an_http_client_can_do(tmp_path, sim) -> None:
    """`amaris serve` answers these errors with 409 to a client that sends steps over HTTP: no CLI advice
    (`--rubric-version`), and a command only as the run's operator's."""
    env = judge_env(sim)
    later, unevolved = new_run(tmp_path, "later"), new_run(tmp_path, "unevolved")
    score(later, tmp_path, 101, env, "--lag", 1)
    score(unevolved, tmp_path, 0, env, "--lag", 1)  # scored from the command line, never evolved
    told: list[str] = []
    with pytest.raises(OutOfOrder) as conflict:
        scoring_version(RunDir(later), 99, 1, None, wait=5, say=told.append, served=True)
    assert "step 101 was scored with --lag 1" in str(conflict.value)
    assert str(conflict.value).endswith("Send step 99 to a server of a run of its own"), str(conflict.value)
    with pytest.raises(NotEvolved) as idle:
        scoring_version(RunDir(unevolved), 2, 1, None, wait=5, say=told.append, served=True)
    assert str(idle.value).endswith(f"not running: the run's operator starts it with `amaris evolve --run "
                                    f"{unevolved} --step 0`"), str(idle.value)
    assert "--rubric-version" not in str(idle.value)


def test_scoring_after_several_unevolved_steps_names_every_evolution_it_needs(tmp_path, sim) -> None:
    """`score --lag` after steps scored but never evolved named only the first: a user ran its `evolve` and was
    told of the next, one step at a time. The error names them all, with the command for each."""
    env = judge_env(sim)
    run = new_run(tmp_path)
    for step in range(3):
        score(run, tmp_path, step, env, "--lag", 3)
    result = score(run, tmp_path, 3, env, "--lag", 1, code=2)
    # (version 2 at most, which the evolution of step 1 writes after step 0's)
    assert "needs the evolutions of steps 0-1, which have not run and are not running" in result.stderr, result.stderr
    assert f"run `amaris evolve --run {run} --step N` for each first" in result.stderr
    evolve(run, 0, env)
    result = score(run, tmp_path, 3, env, "--lag", 1, code=2)
    assert f"needs the evolution of step 1, which has not run and is not running: run `amaris evolve --run {run} " \
           "--step 1` first" in result.stderr, result.stderr


def test_evolving_a_step_nobody_scored_writes_nothing(tmp_path, sim) -> None:
    """`evolve --step 3` of a run that holds steps 0-2 (a typo, or a script one step ahead) left a failed mark in
    a new step directory, which `inspect` then listed as a step with 0 rollouts. It is refused before anything is
    written. (The evolution of a later step waits for step 3, saying that it has no rollouts yet.)"""
    env = judge_env(sim)
    run = new_run(tmp_path)
    for step in range(3):
        score(run, tmp_path, step, env, "--lag", 3)
    result = invoke("evolve", "--run", run, "--step", 3, "--wait", 30, env=env)
    assert result.exit_code == 2 and "step 3 has no complete scores" in result.stderr, result.stderr
    assert sorted(p.name for p in (run / "steps").iterdir()) == ["000000", "000001", "000002"]
