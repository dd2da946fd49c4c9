"""Online mode: separate processes score step t+1 while the evolution of step t runs in the background.

Every test here runs real `amaris` processes against the sim-judge over HTTP on 127.0.0.1, with an
answer latency so that the background evolution is really running while the other command works,
and compares what they wrote with a sequential `loop` of the same steps and lag.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amaris_cli import artifacts, locks
from amaris_cli.rundir import RunDir
from tests.conftest import (
    EXAMPLES,
    FAST_MEMORY,
    TEST_CONFIG,
    clean_env,
    invoke,
    judge_env,
    new_run,
    outputs,
    process_env,
    read_only_copy,
    snapshot,
    step_file,
    stop_signals,
    wait_until,
)


def start(env: dict[str, str], *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "amaris_cli", *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err, out


def holds_step(run: Path, step: int) -> bool:
    return locks.holder(RunDir(run).step_lock_path(step)) is not None


def score(run: Path, step: int, env: dict[str, str], *extra: object) -> None:
    result = invoke("score", step_file(step), "--run", run, "--step", step, *extra, env=env)
    assert result.exit_code == 0, result.stderr


def evolve(run: Path, step: int, env: dict[str, str], *extra: object) -> None:
    result = invoke("evolve", "--run", run, "--step", step, *extra, env=env)
    assert result.exit_code == 0, result.stderr


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Steps 0-3 with lag 1, sequentially, by `loop`."""
    from amaris_cli.simjudge.server import SimJudge

    with SimJudge() as judge:
        run = new_run(tmp_path_factory.mktemp("reference"), "run")
        result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:3", "--lag", "1", env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
    return run


def test_scoring_the_next_step_finishes_while_the_evolution_of_this_one_runs(tmp_path, sim_factory, reference) -> None:
    judge = sim_factory(latency=1.0)
    env = judge_env(judge)
    run = new_run(tmp_path, "online")
    score(run, 0, env, "--lag", "1")
    evolution = start(process_env(judge), "evolve", "--run", run, "--step", 0)
    wait_until(lambda: holds_step(run, 0), what="the evolution to start")
    rewards = tmp_path / "rewards-1.jsonl"
    scorer = start(process_env(judge), "score", step_file(1), "--run", run, "--step", 1, "--lag", 1,
                   "--rewards", rewards, "--json")
    code, err, out = finish(scorer)
    assert code == 0, err
    assert evolution.poll() is None, "the score of step 1 had to finish while the evolution of step 0 still ran"
    assert json.loads(out)["rubric_version"] == 0
    code, err, _ = finish(evolution)
    assert code == 0, err
    ref = outputs(reference)
    got = outputs(run)
    for name in ("steps/000001/scores.jsonl", "steps/000000/update.json", "rubrics/step-000001.json"):
        assert got[name] == ref[name], name
    expected = invoke("rewards", "--run", reference, "--step", "1").stdout
    assert rewards.read_text() == expected


@pytest.mark.parametrize("fmt", ["list", "jsonl"])
def test_score_writes_the_rewards_file_in_input_order_as_the_rewards_command_prints_it(tmp_path, sim, fmt) -> None:
    """`score --rewards FILE --rewards-format F` holds what `amaris rewards --format F` prints: each rollout's
    reward from scores.jsonl, in the order of the input file (shuffled here, so no other order passes)."""
    lines = step_file(0).read_text().splitlines()
    random.Random(7).shuffle(lines)
    source = tmp_path / "shuffled.jsonl"
    source.write_text("\n".join(lines) + "\n")
    order = [json.loads(line)["id"] for line in lines]
    assert order != sorted(order)
    run = new_run(tmp_path, "run")
    rewards = tmp_path / f"rewards.{fmt}"
    scored_now = invoke("score", source, "--run", run, "--step", 0, "--rewards", rewards, "--rewards-format", fmt,
                        env=judge_env(sim))
    assert scored_now.exit_code == 0, scored_now.stderr
    printed = invoke("rewards", "--run", run, "--step", "0", "--format", fmt)
    assert printed.exit_code == 0, printed.stderr
    assert rewards.read_text() == printed.stdout
    scored = {r["rollout_id"]: r for r in map(json.loads, (run / "steps/000000/scores.jsonl").read_text().splitlines())}
    assert all(r["status"] == "scored" for r in scored.values()) and len({r["reward"] for r in scored.values()}) > 2
    if fmt == "list":
        assert json.loads(rewards.read_text()) == [scored[i]["reward"] for i in order]
    else:
        assert [json.loads(line) for line in rewards.read_text().splitlines()] == [
            {"id": i, "reward": scored[i]["reward"], "status": "scored"} for i in order]


def test_an_evolution_started_before_the_previous_one_waits_for_it(tmp_path, sim_factory, reference) -> None:
    judge = sim_factory(latency=0.2)
    env = judge_env(judge)
    run = new_run(tmp_path, "order")
    score(run, 0, env, "--lag", "1")
    score(run, 1, env, "--lag", "1")
    evolve(run, 0, env)
    score(run, 2, env, "--lag", "1")
    evolve(run, 1, env)
    score(run, 3, env, "--lag", "1")
    later = start(process_env(judge), "evolve", "--run", run, "--step", 3)
    wait_until(lambda: holds_step(run, 3), what="the evolution of step 3 to start")
    time.sleep(1.0)  # it is waiting: step 2 has not been evolved and nobody evolves it yet
    assert later.poll() is None and not (run / "steps/000003/summary.json").exists()
    earlier = start(process_env(judge), "evolve", "--run", run, "--step", 2)
    code2, err2, _ = finish(earlier)
    if code2 != 0:
        later.kill()  # it would wait for the evolution of step 2 for ever (evolve waits to be started in any order)
    assert code2 == 0, err2
    code3, err3, _ = finish(later)
    assert code3 == 0, err3
    assert "waiting for the evolution of step 2" in err3
    got, ref = outputs(run), outputs(reference)
    assert got.keys() == ref.keys()
    for name in ref:
        assert got[name] == ref[name], name


def test_a_killed_background_evolution_resumes_to_the_uninterrupted_result(tmp_path, sim_factory, reference) -> None:
    judge = sim_factory(latency=0.15)
    env = judge_env(judge)
    rng = random.Random(20261123)
    expected = {k: v for k, v in outputs(reference).items() if k.startswith(("steps/000000", "steps/000001"))}
    for trial in range(3):
        run = new_run(tmp_path, f"kill-{trial}")
        score(run, 0, env, "--lag", "1")
        score(run, 1, env, "--lag", "1")
        evolve(run, 0, env)
        proc = start(process_env(judge), "evolve", "--run", run, "--step", 1)
        wait_until(lambda run=run: holds_step(run, 1), what="the evolution to start")
        time.sleep(rng.uniform(0.2, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        evolve(run, 1, env)
        got = {k: v for k, v in outputs(run).items() if k.startswith(("steps/000000", "steps/000001"))}
        assert got.keys() == expected.keys(), f"trial {trial}: {set(got) ^ set(expected)}"
        for name, data in expected.items():
            assert got[name] == data, f"trial {trial}: {name}"


def test_readers_work_during_an_evolution(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=0.5)
    env = judge_env(judge)
    run = new_run(tmp_path, "readers")
    score(run, 0, env)
    evolve(run, 0, env)
    score(run, 1, env)
    proc = start(process_env(judge), "evolve", "--run", run, "--step", 1)
    wait_until(lambda: holds_step(run, 1), what="the evolution to start")
    searched = invoke("memory", "search", "--run", run, "rollouts that address the grader", "--json")
    rewards = invoke("rewards", "--run", run, "--step", "1")
    inspected = invoke("inspect", run, "--json")
    still_running = proc.poll() is None
    code, err, _ = finish(proc)
    assert code == 0, err
    assert still_running, "the readers had to run while the evolution did"
    assert searched.exit_code == 0, searched.stderr
    hits = json.loads(searched.stdout)
    assert hits and all(h["step"] == 0 for h in hits)
    assert rewards.exit_code == 0 and len(rewards.stdout.splitlines()) == 16
    assert inspected.exit_code == 0, inspected.stderr
    states = {s["step"]: s["state"] for s in json.loads(inspected.stdout)["steps"]}
    assert states[0] == "updated" and states[1] == "running"


def test_a_second_memory_writer_exits_3_naming_the_holder_while_a_reader_searches(tmp_path, sim_factory) -> None:
    """The embedded ChromaDB store has one writer (two clients on one path lose vectors): while a background
    evolution holds it, `memory rebuild` is refused (exit 3, naming the evolution's command line), and
    `memory search` reads a copy at the same time."""
    judge = sim_factory(latency=0.5)  # the evolution's summarize and update wait on the judge with the lock held
    env = judge_env(judge)
    run = new_run(tmp_path, "writers")
    score(run, 0, env)
    evolve(run, 0, env)
    score(run, 1, env)
    memory_lock = RunDir(run).lock_path("memory")
    assert locks.holder(memory_lock) is None
    proc = start(process_env(judge), "evolve", "--run", run, "--step", 1)
    try:
        wait_until(lambda: "evolve" in (locks.holder(memory_lock) or "") or proc.poll() is not None, timeout=60,
                   what="the evolution to hold the memory writer lock")
        assert proc.poll() is None, "the evolution ended before it held the memory lock"
        holder = locks.holder(memory_lock)
        rebuilt = invoke("memory", "rebuild", "--run", run, env=env)
        searched = invoke("memory", "search", "--run", run, "rollouts that address the grader", "--json")
        held_throughout = locks.holder(memory_lock) == holder and proc.poll() is None
    finally:
        code, err, _ = finish(proc)
    assert code == 0, err
    assert held_throughout, "the rebuild and the search had to run while the evolution held the memory"
    assert holder == f"pid {proc.pid}: amaris evolve --run {run} --step 1"
    assert rebuilt.exit_code == 3, rebuilt.stderr
    assert "Traceback" not in rebuilt.stderr and holder in rebuilt.stderr and f"the memory of {run}" in rebuilt.stderr
    assert searched.exit_code == 0, searched.stderr
    hits = json.loads(searched.stdout)
    assert hits and all(h["step"] == 0 for h in hits)


def test_readers_work_on_a_read_only_copy_of_a_run(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path, "source")
    score(run, 0, env)
    evolve(run, 0, env)
    score(run, 1, env)
    with read_only_copy(run, tmp_path / "ro") as copy:
        before = snapshot(copy)
        for args in (("memory", "search", "--run", copy, "grader", "--json"), ("rewards", "--run", copy, "--step", "1"),
                     ("inspect", copy, "--json"), ("inspect", copy, "--step", "0", "--json"), ("compare", copy, run),
                     ("report", copy, "--out", tmp_path / "report.html")):
            result = invoke(*args)
            assert result.exit_code == 0, f"{args[0]}: {result.stderr}"
        assert json.loads(invoke("memory", "search", "--run", copy, "grader", "--json").stdout)
        assert snapshot(copy) == before


def test_scoring_with_a_lag_whose_version_nothing_will_write_names_the_step_to_evolve(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path, "missing")
    score(run, 0, env, "--lag", "1")
    score(run, 1, env, "--lag", "1")
    result = invoke("score", step_file(2), "--run", run, "--step", "2", "--lag", "1", env=env)
    assert result.exit_code == 2
    assert f"run `amaris evolve --run {run} --step 0`" in result.stderr
    assert not (run / "steps/000002").exists()


def test_score_waits_for_the_evolution_that_writes_its_rubric_version(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=0.5)
    env = judge_env(judge)
    run = new_run(tmp_path, "waits")
    score(run, 0, env, "--lag", "1")
    score(run, 1, env, "--lag", "1")
    proc = start(process_env(judge), "evolve", "--run", run, "--step", 0)
    wait_until(lambda: holds_step(run, 0), what="the evolution to start")
    result = invoke("score", step_file(2), "--run", run, "--step", "2", "--lag", "1", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    assert "waiting for the evolution of step 0" in result.stderr
    # The evolution marks itself done once version 1 is written, and then embeds the step: score goes on at the mark.
    mark = artifacts.evolution(RunDir(run), 0)
    assert mark is not None and mark.status == "done" and (run / "rubrics/step-000001.json").exists(), \
        "score may only go on once the evolution wrote version 1"
    assert finish(proc)[0] == 0
    assert json.loads(result.stdout)["rubric_version"] == 1
    versions = {json.loads(line)["rubric_version"] for line in (run / "steps/000002/scores.jsonl").read_text().splitlines()}
    assert versions == {1}


def test_score_gives_up_after_its_wait(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=2.0)
    env = judge_env(judge)
    run = new_run(tmp_path, "gives-up")
    score(run, 0, env, "--lag", "1")
    score(run, 1, env, "--lag", "1")
    proc = start(process_env(judge), "evolve", "--run", run, "--step", 0)
    wait_until(lambda: holds_step(run, 0), what="the evolution to start")
    result = invoke("score", step_file(2), "--run", run, "--step", "2", "--lag", "1", "--wait", "0.5", env=env)
    proc.kill()
    proc.wait(30)
    assert result.exit_code == 3
    assert "gave up after 0.5s" in result.stderr and "evolution of step 0" in result.stderr


def test_a_second_evolution_of_the_same_step_gets_exit_3_with_the_first_ones_command(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=0.5)
    env = judge_env(judge)
    run = new_run(tmp_path, "twice")
    score(run, 0, env)
    proc = start(process_env(judge), "evolve", "--run", run, "--step", 0)
    wait_until(lambda: holds_step(run, 0), what="the evolution to start")
    second = invoke("evolve", "--run", run, "--step", "0", env=env)
    again = invoke("score", step_file(0), "--run", run, "--step", "0", env=env)
    proc.kill()
    proc.wait(30)
    assert second.exit_code == 3 and again.exit_code == 3
    for result in (second, again):
        assert f"pid {proc.pid}: amaris evolve --run {run} --step 0" in result.stderr


def test_a_run_built_by_separate_commands_replays_byte_for_byte(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path, "commands")
    for step in range(3):
        score(run, step, env, "--lag", "1")
        evolve(run, step, env, *(("--rescore",) if step == 1 else ()))
    before = snapshot(run)
    requests = sim.stats["requests"]
    result = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", "--json")
    assert result.exit_code == 0, result.stderr
    assert sim.stats["requests"] == requests
    assert json.loads(result.stdout)["calls_made"] == 0
    assert outputs(tmp_path / "replayed") == outputs(run)
    assert snapshot(run) == before, "a replay never writes its source"


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_the_train_loop_recipe_runs(tmp_path, mode) -> None:
    """examples/train_loop.sh, as the README shows it: a fake trainer through steps, with its own sim-judge."""
    env = clean_env()
    env["AMARIS"] = str(Path(sys.executable).parent / "amaris")
    run = tmp_path / "run"
    done = subprocess.run(["bash", str(EXAMPLES / "train_loop.sh"), "--mode", mode, "--steps", "3", "--train-seconds", "0",
                           "--judge-latency", "0", "--run", str(run)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines() if line.startswith("step ")] == ["step 0", "step 1", "step 2"]
    assert done.stderr.count("trainer: 16 rewards") == 3 and "sim-judge" in done.stderr
    versions = [json.loads((run / "steps" / f"{s:06d}" / "scores.jsonl").read_text().splitlines()[0])["rubric_version"]
                for s in range(3)]
    assert versions == ([0, 0, 1] if mode == "async" else [0, 1, 2])
    assert all((run / "steps" / f"{s:06d}" / "update.json").exists() for s in range(3))


def test_an_evolution_that_ends_in_an_os_error_leaves_a_failed_mark_that_later_steps_name(tmp_path, sim) -> None:
    """An error that is not amaris's own (here an OSError: the summary's path is a directory) used to end
    `evolve` with no mark: a later `evolve` waited for ever for an evolution "not running", a later `score`
    said it "has not run". The mark names the cause and the command that resumes."""
    env = judge_env(sim)
    run = new_run(tmp_path, "run")
    score(run, 0, env, "--lag", "1")
    (run / "steps/000000/summary.json").mkdir()
    failed = invoke("evolve", "--run", run, "--step", 0, env=env)
    assert failed.exit_code == 1 and "summary.json" in failed.stderr, failed.stderr
    mark = artifacts.evolution(RunDir(run), 0)
    assert mark is not None and mark.status == "failed" and "IsADirectoryError" in (mark.error or ""), mark
    score(run, 1, env, "--lag", "1")
    later = invoke("score", step_file(2), "--run", run, "--step", 2, "--lag", 1, env=env)
    assert later.exit_code != 0 and "the evolution of step 0 failed (IsADirectoryError" in later.stderr, later.stderr
    assert "amaris evolve --run" in later.stderr
    (run / "steps/000000/summary.json").rmdir()
    evolve(run, 0, env)


# --- red team -----------------------------------------------------------------------------------------------
# `loop` beside a background `evolve`, real processes against the sim-judge over HTTP.
#
# A shell script that evolved step 1 in the background (`evolve --step 1 &`) and then resumes with `loop
# --steps 2:` must get the same run as a script that waited: the loop waits for that evolution (up to
# --wait, like every pipeline command), and does not take the memory's writer lock before it needs it (else
# the evolution it waits for can never finish: it waits for that lock).


def test_a_loop_started_beside_a_running_evolution_waits_for_it(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=0.2)
    env = judge_env(judge)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG + FAST_MEMORY)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    score(run, 0, env, "--lag", "1")
    # --concurrency 1: its 16 analyses come one after the other, so the loop starts while they do
    background = start(process_env(judge), "evolve", "--run", run, "--step", 0, "--concurrency", 1)
    wait_until(lambda: holds_step(run, 0), what="the evolution of step 0 to start")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "1:1", "--lag", "1", "--wait", "60", env=env)
    code, err, _ = finish(background)
    assert code == 0, err
    assert result.exit_code == 0, result.stderr
    assert "waiting for the evolution of step 0" in result.stderr
    assert (run / "rubrics/step-000002.json").exists()
    detail = json.loads(invoke("inspect", run, "--step", 1, "--json").stdout)["detail"]
    assert detail["state"] == "updated" and detail["stale"] == [], detail
    assert json.loads((run / "steps/000001/update.json").read_text())["from_version"] == 1


@pytest.mark.parametrize("command", ["evolve", "loop"])
def test_ctrl_c_ends_a_command_that_waits_for_an_earlier_evolution(tmp_path, sim, command: str) -> None:
    """One Ctrl-C (SIGINT) ends `evolve` and `loop` while they wait for the evolution of an earlier step. The wait
    ran inside the event loop, which takes Ctrl-C as a request to cancel its task at its next await, and none came
    until --wait ran out (an hour by default); `amaris serve`'s stop killed such an evolution after a grace."""
    env = judge_env(sim)
    run = new_run(tmp_path)
    score(run, 0, env, "--lag", "1")
    score(run, 1, env, "--lag", "1")
    with locks.exclusive(RunDir(run).step_lock_path(0), "step 0", role="evolve"):  # its evolution runs
        args = (("evolve", "--run", run, "--step", 1) if command == "evolve" else
                ("loop", EXAMPLES / "math", "--run", run, "--steps", "2:2", "--lag", "1"))
        # As a terminal runs a command: SIGINT at its default, whatever this process's is (a job started with `&`
        # by a script ignores SIGINT, and its children inherit that).
        proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", *map(str, args), "--wait", "120"],
                                env=process_env(sim), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            waiting = ((lambda: (run / "steps/000001/analyses.jsonl").exists()) if command == "evolve" else
                       (lambda: holds_step(run, 2)))  # evolve analyzes its step first, then waits
            wait_until(waiting, timeout=60, what="the wait")
            time.sleep(1)
            proc.send_signal(signal.SIGINT)
            started = time.monotonic()
            code, err, _ = finish(proc, timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert time.monotonic() - started < 15, err
    assert code == 130 and "waiting for the evolution of step 0" in err and "interrupted" in err, (code, err)


def _signal_once_it_says(proc: subprocess.Popen[str], said: str, signum: int,
                         timeout: float = 30) -> tuple[int | None, str, str, float]:
    """Send `signum` to `proc` once its stderr says `said`: (its exit code, None if it did not end within `timeout`;
    its stderr up to then and after; seconds from the signal to its end). `proc` is killed if it goes on."""
    try:
        err = ""
        while said not in err:  # it says so once it waits
            line = proc.stderr.readline()  # type: ignore[union-attr]
            assert line, f"ended before saying {said!r}: {err}"
            err += line
        proc.send_signal(signum)
        started = time.monotonic()
        try:
            code, rest, _ = finish(proc, timeout=timeout)
        except subprocess.TimeoutExpired:
            code, rest = None, ""
        return code, err, rest, time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_ends_a_command_that_waits_for_an_earlier_evolution_as_ctrl_c_does(tmp_path, sim, sigint: str) -> None:
    """SIGTERM (`timeout`, `kill`, a scheduler's preemption, CI) ends `evolve` waiting in its event loop as Ctrl-C does: its
    task is cancelled and cleans up, it says it was terminated, exits 143, and the same command run again finishes. It
    died at once (-15), its cleanup skipped. Also with SIGINT ignored (a job a script starts with `&`): SIGTERM sent on
    to the process as SIGINT would have been ignored there."""
    env = judge_env(sim)
    run = new_run(tmp_path, extra=FAST_MEMORY)
    score(run, 0, env, "--lag", "1")
    score(run, 1, env, "--lag", "1")
    with locks.exclusive(RunDir(run).step_lock_path(0), "step 0", role="evolve"):  # its evolution runs
        proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", "evolve", "--run", str(run), "--step", "1", "--wait", "120"],
                                env=process_env(sim), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=stop_signals(signal.SIG_DFL if sigint == "default" else signal.SIG_IGN))
        code, err, rest, took = _signal_once_it_says(proc, "waiting for the evolution of step 0", signal.SIGTERM)
    assert took < 10 and code == 143, (code, took, err + rest)
    assert "terminated: re-run the same command to continue where it stopped" in " ".join(rest.split()), rest
    evolve(run, 0, env)  # the evolution it waited for ends; the same command goes on where it stopped
    evolve(run, 1, env, "--wait", "120")
    assert artifacts.evolution(RunDir(run), 1).status == "done"


@pytest.mark.parametrize("command", ["evolve", "loop"])
def test_ctrl_c_ends_a_command_that_waits_for_the_memorys_writer(tmp_path, sim, command: str) -> None:
    """One Ctrl-C (SIGINT) ends `evolve` and `loop` while they wait for the memory's writer lock, held by another
    writer (`memory rebuild`, the previous step's evolution still indexing). The wait ran in a bare worker thread that
    nothing stopped: the command went on after Ctrl-C until the lock was free or --wait ran out."""
    env = judge_env(sim)
    run = new_run(tmp_path)
    score(run, 0, env)
    memory_lock = RunDir(run).lock_path("memory")
    with locks.exclusive(memory_lock, "the memory", role="rebuild"):  # another writer holds the memory
        args = (("evolve", "--run", run, "--step", 0) if command == "evolve" else
                ("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0"))
        proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", *map(str, args), "--wait", "120"],
                                env=process_env(sim), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        code, err, rest, took = _signal_once_it_says(proc, "waiting for the memory", signal.SIGINT)  # (lock held)
    assert took < 15, f"Ctrl-C took {took:.1f}s"
    assert code == 130 and "interrupted" in rest, (code, err + rest)
