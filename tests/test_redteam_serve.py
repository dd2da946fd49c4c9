"""Red-team tests of `amaris serve`: what a hostile client, a stalled client, an operator who kills and
restarts the server, and a retrying trainer do to it.

Every test runs the real server as a subprocess on 127.0.0.1 against the sim-judge (tests/served.py)
and is bounded in time: a server that hangs is killed and the test fails, it never waits for `--wait`.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from amaris_cli import locks
from amaris_cli.rollouts import parse_rollouts
from amaris_cli.rundir import RunDir
from amaris_cli.stepfiles import MAX_STEP
from tests.conftest import invoke, judge_env, new_run, step_file, wait_until
from tests.served import Served, serve_env, served, start_server


def lines(step: int, n: int | None = None) -> list[dict[str, Any]]:
    """Lines of the example step file as /score bodies (they carry ids)."""
    rows = [json.loads(line) for line in step_file(step).read_text().splitlines()][:n]
    return [{**r, "metadata": {**r["metadata"], "current_step": step}} for r in rows]


def port_of(server: Served) -> int:
    return int(server.url.rsplit(":", 1)[1])


def stored_ids(run: Path, step: int) -> list[str]:
    return [json.loads(line)["id"] for line in (run / "steps" / f"{step:06d}" / "rollouts.jsonl").read_text().splitlines()]


def test_a_huge_current_step_does_not_freeze_the_server(tmp_path, sim) -> None:
    """Opening step t waited for steps 0..t-2 by looking at each of them: `current_step` near MAX_STEP
    kept the event loop busy for minutes, and every other request (and SIGTERM) waited."""
    run = new_run(tmp_path, "huge")
    server = start_server(run, serve_env(sim))
    answers: list[httpx.Response] = []
    try:
        body = {"prompt": "What is 2+2?", "response": "4", "id": "far", "metadata": {"current_step": MAX_STEP}}
        sender = threading.Thread(target=lambda: answers.append(httpx.post(f"{server.url}/score", json=body, timeout=30)),
                                  daemon=True)
        sender.start()
        time.sleep(0.3)  # the request is being handled
        try:
            health = httpx.get(f"{server.url}/health", timeout=20)  # the bug froze it for minutes; load takes seconds
        except httpx.TimeoutException:
            raise AssertionError("the server stopped answering while it opened a step near MAX_STEP") from None
        assert health.status_code == 200
        sender.join(20)
        assert answers and answers[0].status_code == 200 and answers[0].json()["step"] == MAX_STEP
        assert server.stop(timeout=20) == 0
    finally:
        server.stop(signal.SIGKILL)


def test_a_restart_completes_a_step_that_already_holds_rollouts_per_step(tmp_path, sim) -> None:
    """A server killed after the N-th rollout was journaled but before the step was completed (or restarted
    with --rollouts-per-step N) must complete the step itself: no further rollout will come to do it, and in
    sync mode every retry would wait for that completion until --wait."""
    run = new_run(tmp_path, "resume-auto")
    env = serve_env(sim)
    posted = lines(0, 4)
    first = start_server(run, env)
    try:
        answers = [httpx.post(f"{first.url}/score", json=line, timeout=30).json() for line in posted]
    finally:
        first.stop(signal.SIGKILL)  # the journal holds the 4 judged rollouts, the step is not complete
    with served(run, sim, "--rollouts-per-step", "4") as server:
        assert "step 0: open again with the 4 rollout(s)" in server.stderr
        wait_until(lambda: (run / "steps/000000/scores.jsonl").exists(), timeout=10,
                   what="the restarted server to complete the step that holds --rollouts-per-step rollouts")
        again = httpx.post(f"{server.url}/score", json=posted[1], timeout=30)  # a retry is answered from the files
        assert again.status_code == 200 and again.json() == answers[1]
    assert stored_ids(run, 0) == [line["id"] for line in posted]


def test_sigterm_ends_a_wait_for_an_evolution_another_process_runs(tmp_path, sim) -> None:
    """The first rollout of step 2 waits for the evolution of step 0; while another process runs it, a
    SIGTERM must stop the server within seconds (the wait ran in a thread that nothing ended, so the
    server hung after saying `stopped` until --wait ran out)."""
    run = new_run(tmp_path, "held")
    assert invoke("score", step_file(0), "--run", run, "--step", 0, env=judge_env(sim)).exit_code == 0
    server = start_server(run, serve_env(sim))
    answers: list[httpx.Response] = []
    try:
        with locks.exclusive(RunDir(run).step_lock_path(0), "step 0", role="evolve"):  # as `amaris evolve` holds it
            body = {"prompt": "What is 2+2?", "response": "4", "metadata": {"current_step": 2}}
            sender = threading.Thread(target=lambda: answers.append(httpx.post(f"{server.url}/score", json=body,
                                                                               timeout=30)), daemon=True)
            sender.start()
            server.wait_for_line("waiting for the evolution of step 0", timeout=15)
            started = time.monotonic()
            assert server.stop(timeout=15) == 0
            assert time.monotonic() - started < 10
        sender.join(10)
    finally:
        server.stop(signal.SIGKILL)
    assert answers and answers[0].status_code == 503, "the waiting rollout is told the server is stopping"
    assert "Traceback" not in server.stderr, server.stderr


def test_sigterm_is_not_held_by_a_client_stalled_mid_body(tmp_path, sim) -> None:
    """A client that sent its headers and part of its body, then nothing (a stuck worker, a slow-loris),
    held the shutdown for uvicorn's whole 30-second grace and left a traceback per connection."""
    run = new_run(tmp_path, "stalled")
    server = start_server(run, serve_env(sim))
    stalled = []
    try:
        for _ in range(3):
            raw = socket.create_connection(("127.0.0.1", port_of(server)), timeout=10)
            raw.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{\"prompt\": ")
            stalled.append(raw)
        assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200  # the others are served meanwhile
        started = time.monotonic()
        assert server.stop(timeout=20) == 0
        took = time.monotonic() - started
    finally:
        server.stop(signal.SIGKILL)
        for raw in stalled:
            raw.close()
    assert took < 10, f"SIGTERM took {took:.1f}s because of clients stalled mid-body"
    assert "Traceback" not in server.stderr, server.stderr


def test_retries_of_a_step_whose_evolution_failed_do_not_run_it_again(tmp_path, sim_factory) -> None:
    """Under --on-error fail a step with failed scores ends `failed`. A trainer that retries rollouts of it
    (same id) gets their answers; each retry used to re-read the journal, say `its evolution resumes` and
    start `amaris evolve` again (status flipping back to `evolving`)."""
    judge = sim_factory(agent_fault_rate={"scorer": 0.4})
    run = new_run(tmp_path, "failed")
    posted = lines(0, 6)
    with served(run, judge) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        answers = [http.post("/score", json=line).json() for line in posted]
        assert any(a["status"] == "failed" for a in answers)
        assert http.post("/complete", json={"step": 0}).status_code == 200
        assert http.get("/rubric_status/wait", params={"step": 0, "timeout": 60}).json()["state"] == "failed"
        for line, answer in zip(posted[:3], answers, strict=False):
            assert http.post("/score", json=line).json() == answer
            assert http.get("/rubric_status", params={"step": 0}).json()["state"] == "failed"
        time.sleep(0.5)
    assert server.stderr.count("step 0: evolution failed") == 1, server.stderr
    assert "its evolution resumes" not in server.stderr


def test_a_given_id_equal_to_the_content_id_is_still_an_id(tmp_path, sim) -> None:
    """An `id` that happens to equal the rollout's content id (a line re-sent from a served run's
    rollouts.jsonl, where id-less rollouts got content ids) is a given id: sending it again is a retry,
    answered without a new rollout, not a second rollout `ID-2`."""
    run = new_run(tmp_path, "content-id")
    line = {"prompt": "What is 6*7?", "response": "42", "reference": "42"}
    content = parse_rollouts(json.dumps(line).encode(), Path("line"))[0].id
    body = {**line, "id": content, "metadata": {"current_step": 0}}
    with served(run, sim) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        first, second = http.post("/score", json=body).json(), http.post("/score", json=body).json()
        assert http.post("/complete", json={"step": 0}).status_code == 200
    assert first["id"] == second["id"] == content
    assert stored_ids(run, 0) == [content]


def test_a_restart_with_other_scoring_options_does_not_mix_them_into_a_step(tmp_path, sim_factory) -> None:
    """The journal's records were judged under the first server's failure policy and model. A restart with
    other ones wrote them into scores.jsonl whose provenance claims the new ones (e.g. `on_error: neutral`
    with failed rewards left null, or another model for verdicts it never gave). It is refused instead,
    as a restart in the other mode is."""
    judge = sim_factory(agent_fault_rate={"scorer": 0.4})
    run = new_run(tmp_path, "options")
    env = serve_env(judge)
    with served(run, judge) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        answers = [http.post("/score", json=line).json() for line in lines(0, 6)]
    assert any(a["status"] == "failed" and a["score"] is None for a in answers)
    for option in (("--on-error", "neutral"), ("--model", "another-model")):
        again = start_server_or_exit(run, env, *option)
        assert isinstance(again, int) and again != 0, f"{option}: the server started and took the journal"
    assert not (run / "steps/000000/scores.jsonl").exists()
    with served(run, judge) as server:  # the same options finish the step
        assert httpx.post(f"{server.url}/complete", json={"step": 0}, timeout=60).json()["rollouts"] == 6


def start_server_or_exit(run: Path, env: dict[str, str], *args: object) -> Served | int:
    """The server, stopped again, when it starts; its exit code when it refuses to."""
    try:
        server = start_server(run, env, *args)
    except AssertionError as exc:
        assert "restart with" in str(exc), str(exc)
        return 1
    server.stop()
    return server


def test_a_second_server_names_the_server_that_holds_the_step(tmp_path, sim) -> None:
    """A second `amaris serve` on a run whose open step another server holds answered 409 "step 0 is complete
    (.../rollouts.jsonl)" for a file that did not exist, and "step 0 has no rollouts" to /complete: both
    must name the holder, as `score` does with exit 3."""
    run = new_run(tmp_path, "two")
    body = lines(0, 1)[0]
    with served(run, sim) as first:
        assert httpx.post(f"{first.url}/score", json=body, timeout=30).status_code == 200
        with served(run, sim) as second:
            for answer in (httpx.post(f"{second.url}/score", json=lines(0, 2)[1], timeout=30),
                           httpx.post(f"{second.url}/complete", json={"step": 0}, timeout=30)):
                assert answer.status_code == 409, answer.text
                error = answer.json()["error"]
                assert "being written by another amaris process" in error and "amaris serve" in error, error
                assert f"pid {first.proc.pid}" in error and "rollouts.jsonl" not in error, error
        assert not (run / "steps/000000/rollouts.jsonl").exists()
        assert httpx.post(f"{first.url}/complete", json={"step": 0}, timeout=30).status_code == 200
