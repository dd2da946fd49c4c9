"""`amaris serve`: the reference server's API over a run directory.

Every test runs the server as a real subprocess on 127.0.0.1 (tests/served.py) against the sim-judge
through the real SDK, talks to it over HTTP, and checks what it wrote against what `amaris score` +
`amaris evolve` write for the same rollouts in the same order.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from amaris_cli import locks
from amaris_cli.report.collect import collect
from amaris_cli.rollouts import parse_rollouts, read_rollouts
from amaris_cli.rundir import RunDir, safe_instance_dir
from amaris_cli.serve.client import AmarisClient, ServeError
from amaris_cli.simjudge import rules
from amaris_cli.simjudge.server import SimJudge
from amaris_cli.stepfiles import MAX_STEP
from tests.conftest import (
    TEST_CONFIG,
    invoke,
    judge_env,
    new_run,
    outputs,
    read_jsonl,
    step_file,
    wait_until,
    write_jsonl,
)
from tests.served import Served, serve_env, served, start_server
from tests.test_per_instance import population

SERVED_SOURCE = {"path": "POST /score"}


def rows(step: int) -> list[dict[str, Any]]:
    return read_jsonl(step_file(step))


def body(row: dict[str, Any]) -> dict[str, Any]:
    """An example line in the reference's field names (the client's keyword arguments)."""
    return {"prompt": row["input"], "response": row["output"], "reference": row["supplemental_context"],
            "id": row["id"], "metadata": row["metadata"]}


def comparable(files: dict[str, bytes]) -> dict[str, bytes]:
    """The run's step and rubric files, where the rollouts' source in provenance.json (`score` records its
    input file, `serve` records POST /score) is the only part that may differ."""
    out = dict(files)
    for name, data in files.items():
        if name.endswith("provenance.json"):
            value = json.loads(data)
            entry = value["files"]["rollouts.jsonl"]
            entry["inputs"]["source"] = entry["digest"] = "(source)"
            out[name] = json.dumps(value, sort_keys=True).encode()
    return out


def served_sources(run: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text())["files"]["rollouts.jsonl"]["inputs"]["source"]
            for p in sorted((run / "steps").glob("*/provenance.json"))]


def by_commands(tmp_path: Path, served_run: Path, judge: SimJudge, steps: range) -> Path:
    """What the commands write for the served run's rollouts, in the order it stored them."""
    inputs = tmp_path / "served-rollouts"
    inputs.mkdir()
    files = [shutil.copy(served_run / "steps" / f"{step:06d}" / "rollouts.jsonl", inputs / f"{step}.jsonl")
             for step in steps]
    return async_by_commands(new_run(tmp_path, "by-commands"), files, judge)


def async_by_commands(run: Path, files: list[Path], judge: SimJudge) -> Path:
    """`score --lag 1` + `evolve --failed-step carry` (what async serve's evolutions are) of each file, step by step."""
    for step, rollouts in enumerate(files):
        for args in (("score", rollouts, "--lag", "1"), ("evolve", "--failed-step", "carry")):
            result = invoke(*args, "--run", run, "--step", step, env=judge_env(judge))
            assert result.exit_code == 0, result.stderr
    return run


def exported(run: Path, step: int, *extra: str) -> dict[str, float | None]:
    result = invoke("rewards", "--run", run, "--step", step, *extra)
    assert result.exit_code == 0, result.stderr
    return {row["id"]: row["reward"] for row in map(json.loads, result.stdout.splitlines())}


def read_answer(raw: socket.socket) -> str:
    """A whole HTTP answer from a socket (headers and the body its content-length announces)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += raw.recv(4096)
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(rest) < length:
        rest += raw.recv(4096)
    return (head + b"\r\n\r\n" + rest).decode()


# --- the main path -------------------------------------------------------------------------------------


def test_three_steps_of_concurrent_scores_write_what_score_and_evolve_write(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=0.1)
    run = new_run(tmp_path, "served")
    with served(run, judge) as server:
        client = AmarisClient(server.url)

        async def post(step: int) -> list:
            return await asyncio.gather(*(client.score_async(step=step, **body(r)) for r in rows(step)))

        async def train() -> tuple:
            first, second = await asyncio.gather(post(0), post(1))  # two steps open at once
            completed = await asyncio.gather(client.rollouts_complete_async(0), client.rollouts_complete_async(1))
            third = await post(2)  # scored with version 1: waits for the evolution of step 0
            completed.append(await client.rollouts_complete_async(2))
            return first, second, third, completed, await client.rubric_updated_async(2, timeout=120)

        first, second, third, completed, status = asyncio.run(train())
        again = client.rollouts_complete(0)
    assert [c.rollouts for c in completed] == [16, 16, 16] and again.already_complete
    assert {a.rubric_version for a in first + second} == {0} and {a.rubric_version for a in third} == {1}
    assert status.step == 2 and status.state == "done" and status.updated and status.rubric_version == 3
    for step, answers in enumerate((first, second, third)):
        assert {a.id: a.score for a in answers} == exported(run, step), f"step {step}: the answers are the run's rewards"
    # The served rollouts are the posted lines, read as `score` reads them from the example files.
    for step in range(3):
        stored = {r["id"]: r for r in read_jsonl(run / "steps" / f"{step:06d}" / "rollouts.jsonl")}
        assert stored == {r.id: r.model_dump(mode="json") for r in read_rollouts(step_file(step))}
    reference = by_commands(tmp_path, run, judge, range(3))
    got, want = comparable(outputs(run)), comparable(outputs(reference))
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    assert served_sources(run) == [SERVED_SOURCE] * 3
    # Each rollout was analyzed by the server as soon as it was judged; the evolutions found every analysis
    # answered in calls.jsonl (a `cache` line) and wrote analyses.jsonl byte for byte as above.
    analyzer = [json.loads(x)["source"] for x in (run / "calls.jsonl").read_text().splitlines()
                if json.loads(x)["agent"] == "analyzer"]
    assert sorted(analyzer) == ["cache"] * 48 + ["model"] * 48, analyzer
    assert not (run / ".serve").exists() or not list((run / ".serve").iterdir()), "journals go once evolved"
    # Readers work on a served run unchanged.
    for args in (("inspect", run, "--json"), ("inspect", run, "--step", "2"), ("compare", run, reference),
                 ("report", run, "--out", tmp_path / "report.html")):
        result = invoke(*args)
        assert result.exit_code == 0, f"{args[0]}: {result.stderr}"
    assert [s["state"] for s in json.loads(invoke("inspect", run, "--json").stdout)["steps"]] == ["updated"] * 3


def test_sync_mode_answers_with_the_value_rescored_by_the_steps_own_update(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=0.05)
    run = new_run(tmp_path, "sync")
    # answer keys from the server's environment (its evolve workers inherit it): recorded, so the replay below,
    # in a shell without them, asks what the server asked
    answer_keys = {"AMARIS_SCORER_TEMPERATURE": "0.2", "AMARIS_SYSTEM_ROLE": "user"}
    with served(run, judge, "--mode", "sync", "--rollouts-per-step", "8", env={**serve_env(judge), **answer_keys}) as server:
        client = AmarisClient(server.url)

        async def post(step: int) -> list:
            return await asyncio.gather(*(client.score_async(step=step, **body(r)) for r in rows(step)[:8]))

        zero = asyncio.run(post(0))  # answered only once step 0 is complete, evolved and re-scored
        one = asyncio.run(post(1))
    for step, answers in ((0, zero), (1, one)):
        scores = {r["rollout_id"]: r for r in read_jsonl(run / "steps" / f"{step:06d}" / "scores.jsonl")}
        rescores = {r["rollout_id"]: r for r in read_jsonl(run / "steps" / f"{step:06d}" / "rescores.jsonl")}
        for a in answers:
            assert a.rescored and a.rubric_version == step + 1 and a.score == rescores[a.id]["reward"]
            assert a.initial is not None and a.initial.rubric_version == step == scores[a.id]["rubric_version"]
            assert a.initial.score == scores[a.id]["reward"]
        assert {a.id: a.score for a in answers} == exported(run, step, "--rescored")
    assert any(a.score != a.initial.score for a in zero), "the update of step 0 changed some rewards"
    made = json.loads((run / "steps/000001/provenance.json").read_text())
    assert made["files"]["scores.jsonl"]["inputs"]["lag"] == 0 and made["evolution"]["rescore"] is True
    recorded = {"default": {"system_role": "user"}, "scorer": {"temperature": 0.2}}
    assert made["files"]["scores.jsonl"]["environment"] == made["evolution"]["environment"] == recorded
    # A replay runs each recorded step as `score --lag 0` + `evolve --rescore` from the served calls alone.
    replayed = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", "--json")
    assert replayed.exit_code == 0, replayed.stderr
    assert json.loads(replayed.stdout)["calls_made"] == 0 and outputs(tmp_path / "replayed") == outputs(run)


def test_a_step_completes_by_itself_after_rollouts_per_step(tmp_path, sim) -> None:
    run = new_run(tmp_path, "auto")
    first = rows(0)[:4]
    with served(run, sim, "--rollouts-per-step", "4") as server:
        client = AmarisClient(server.url)
        answers = [client.score(step=0, **body(r)) for r in first]
        wait_until(lambda: (run / "steps/000000/scores.jsonl").exists(), what="the automatic completion")
        with pytest.raises(ServeError) as late:
            client.score(step=0, **body(rows(0)[4]))
        repeated = client.score(step=0, **body(first[1]))  # a retry of a rollout it holds: answered, not refused
        again = client.rollouts_complete(0)
    assert late.value.status == 409 and "step 0 is complete" in late.value.error
    assert repeated == answers[1] and again.already_complete and again.rollouts == 4
    assert [r["rollout_id"] for r in read_jsonl(run / "steps/000000/scores.jsonl")] == [r["id"] for r in first]
    assert [a.score for a in answers] == list(exported(run, 0).values())


def test_per_instance_rubrics_score_and_evolve_each_instance(tmp_path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    predefined = write_jsonl(tmp_path / "inst.jsonl", [
        {"instance_id": "five-plus-five", "adaptive": [{"id": "units", "text": "The response is concise.", "weight": 1.0}]},
    ])
    run = tmp_path / "per-instance"
    init = ("--per-instance", "--instance-rubrics", predefined)
    assert invoke("init", run, "--config", config, *init).exit_code == 0
    with served(run, sim, "--rollouts-per-step", "8") as server:
        client = AmarisClient(server.url)

        async def post() -> list:
            return await asyncio.gather(*(client.score_async(
                r["input"], r["output"], step=0, reference=r["answer"], id=r["id"],
                metadata={"instance_id": r["instance_id"]}) for r in population(0)))

        answers = asyncio.run(post())
        status = client.rubric_updated(0, timeout=120)
    assert status.state == "done" and status.updated
    assert {a.id: a.instance_id for a in answers} == {r["id"]: r["instance_id"] for r in population(0)}
    verdicts = {r["rollout_id"]: {v["criterion_id"] for v in r["verdicts"]} for r in read_jsonl(run / "steps/000000/scores.jsonl")}
    assert verdicts["0-five-plus-five-0"] == {"correct-answer", "units"}
    assert verdicts["0-six-times-seven-0"] == {"correct-answer", "shows-reasoning"}
    for instance in ("six-times-seven", "five-plus-five"):
        assert (run / "rubrics" / "instances" / safe_instance_dir(instance) / "step-000001.json").exists()
    # `replay` re-runs the step as `score` + `evolve` run it, answering every request from the served
    # run's calls.jsonl (--offline: a request the server did not send the same way would be an error).
    replayed = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", "--json")
    assert replayed.exit_code == 0, replayed.stderr
    assert json.loads(replayed.stdout)["calls_made"] == 0 and outputs(tmp_path / "replayed") == outputs(run)


def test_per_instance_carry_skips_only_the_instance_with_a_failed_rollout(tmp_path, sim) -> None:
    """Under serve's default (fail, carry), one rollout the judge could not score skipped the evolution of every
    instance of the step: none learned anything. Only its own instance is skipped now; the others are analyzed,
    summarized and updated, and a replay repeats it."""
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "per-instance"
    assert invoke("init", run, "--config", config, "--per-instance").exit_code == 0
    rows = population(0)
    # Its own text: a replay answers a request from the record of the same request, and another rollout of the
    # instance has the same text (judged then).
    rows[0] = {**rows[0], "output": rows[0]["output"] + " Trust me."}
    with served(run, sim) as server:
        client = AmarisClient(server.url)

        def post(r: dict) -> Any:
            return client.score_async(r["input"], r["output"], step=0, reference=r["answer"], id=r["id"],
                                      metadata={"instance_id": r["instance_id"]})

        async def train() -> list:
            sim.config.agent_faults["scorer"] = "wrong_shape"
            first = await asyncio.gather(post(rows[0]), return_exceptions=True)
            sim.config.agent_faults.clear()
            return [*first, *await asyncio.gather(*(post(r) for r in rows[1:]))]

        answers = asyncio.run(train())
        client.rollouts_complete(0)
        status = client.rubric_updated(0, timeout=120)
    assert rows[0]["instance_id"] == "six-times-seven" and answers[0].status == "failed"
    assert [a.status for a in answers[1:]] == ["scored"] * 7
    assert status.state == "done" and status.skipped is not None
    assert "instance six-times-seven" in status.skipped and "five-plus-five" not in status.skipped
    step0 = run / "steps/000000"
    six, five = (step0 / "instances" / safe_instance_dir(i) for i in ("six-times-seven", "five-plus-five"))
    skipped = json.loads((six / "summary.json").read_text())["skipped"]
    assert "rollouts of the instance could not be judged" in skipped["reason"] and skipped["judged"] == 3
    # Not analyzed either, as a whole step with failed scores is not: nothing of it reaches the memory.
    assert skipped["analyzed"] == 0
    analyzed = {a["rollout_id"] for a in read_jsonl(step0 / "analyses.jsonl")}
    assert analyzed == {r["id"] for r in rows if r["instance_id"] == "five-plus-five"}
    evaluated = json.loads((five / "summary.json").read_text())
    assert evaluated["skipped"] is None and evaluated["n_analyzed"] == 4
    assert json.loads((six / "update.json").read_text())["carried_forward"]["cause"] == "skipped"
    updated = json.loads((five / "update.json").read_text())  # the updater was asked (the gate may refuse it)
    assert updated["strategy"] and (updated["carried_forward"] or {}).get("cause") != "skipped", updated
    replayed = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert replayed.exit_code == 0, replayed.stderr
    for name in ("summary.json", "update.json"):
        for instance in ("six-times-seven", "five-plus-five"):
            where = f"steps/000000/instances/{safe_instance_dir(instance)}/{name}"
            assert (tmp_path / "replayed" / where).read_bytes() == (run / where).read_bytes()


def test_early_analyses_run_in_a_pause_of_scoring_without_complete(tmp_path, sim) -> None:
    """Rollouts posted back to back, then a pause: the step's analyses go in the pause, not at /complete."""
    run = new_run(tmp_path, "served")
    posted = rows(0)[:12]
    with served(run, sim) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        for row in posted:  # back to back, as a trainer posting each rollout as it is generated
            assert http.post("/score", json={**body(row), "metadata": {"current_step": 0}}).status_code == 200
        wait_until(lambda: sim.stats["agent:analyzer"] >= len(posted), 60, "the analyses of the paused step")
    assert sim.stats["agent:scorer"] == len(posted) + 1  # and the run's scale check (a reply of 1s and 0s)


def early_analyses_with(monkeypatch, analysis) -> tuple[Any, Any]:  # noqa: ANN001 - pytest's, analyze_rollout's
    """serve's EarlyAnalyses in this process, each analysis `analysis` instead of the analyzer's request: a maker of
    one (inside a running loop), and a record to start analyses with."""
    from types import SimpleNamespace

    from amaris_cli.config import Settings
    from amaris_cli.serve import analyses

    monkeypatch.setattr(analyses, "analyze_rollout", analysis)
    monkeypatch.setattr(analyses, "rubric_for", lambda *args, **kwargs: None)

    def new() -> analyses.EarlyAnalyses:
        return analyses.EarlyAnalyses(SimpleNamespace(settings=Settings(), run=None, kit=None), lambda text: None)  # type: ignore[arg-type]

    return new, SimpleNamespace(rubric_version=0, instance_id=None)


def test_an_early_analysis_starts_only_once_scoring_has_been_quiet(monkeypatch) -> None:
    """Scoring is the trainer's critical path, an analysis is not: no analysis starts within QUIET_S of a rollout
    arriving or being judged (on the event loop's clock), and once scoring pauses they all go; a step's completion
    lets them go at once."""
    from amaris_cli.serve import analyses

    starts: list[tuple[int, float]] = []

    async def analysis(kit, rubric, rollout, record, step):  # noqa: ANN001, ANN202 - analyze_rollout's signature
        starts.append((step, asyncio.get_running_loop().time()))

    new_early, record = early_analyses_with(monkeypatch, analysis)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        early = new_early()
        events = []
        for _ in range(20):  # a stream: an arrival and a judgement every QUIET_S / 5
            events.append(loop.time())  # before scoring() reads the clock: a preemption between them stays on the safe side
            early.scoring()
            early.start(0, None, record)  # type: ignore[arg-type]
            await asyncio.sleep(analyses.QUIET_S / 5)
        while len(starts) < 20:
            await asyncio.sleep(0.001)
        for _, at in starts:
            before = [e for e in events if e <= at]
            # Released once scoring was quiet: at `at`, or at the end of the quiet gap just before the last arrival
            # when that arrival came in the same turn of a stalled loop (a loaded machine: the release and the
            # arrival ran one after the other, and the analysis began a few microseconds after both).
            same_turn = len(before) >= 2 and before[-1] - before[-2] >= analyses.QUIET_S and at - before[-1] < 0.0005
            assert at - before[-1] >= analyses.QUIET_S or same_turn, (events, starts)
        # A step that completes goes at once, while /score goes on without a pause.
        streaming = True

        async def stream() -> None:
            while streaming:
                early.scoring()
                await asyncio.sleep(0)

        scoring = asyncio.create_task(stream())
        early.start(1, None, record)  # type: ignore[arg-type]
        await asyncio.wait_for(early.settle(1), 5)
        streaming = False
        await scoring
        assert starts[-1][0] == 1
        await early.stop()

    asyncio.run(scenario())


# --- bad requests, conflicts and failures ----------------------------------------------------------------


def test_bad_requests_get_a_4xx_with_a_json_reason(tmp_path, sim) -> None:
    run = new_run(tmp_path, "bad")
    ok = {"prompt": "What is 2+2?", "response": "4", "metadata": {"current_step": 0}}
    cases: list[tuple[str, str, Any, int, str]] = [
        ("POST", "/score", b"{not json", 400, "invalid JSON"),
        ("POST", "/score", b"", 400, "the body is empty"),
        # too deep to read is still JSON, as a depth just over the limit is (422 both)
        ("POST", "/score", b'{"prompt": "q", "response": "a", "metadata": ' + b"[" * 2000 + b"]" * 2000 + b"}", 422,
         "nests deeper than 64 levels"),
        ("POST", "/score", b'{"prompt": "q", "response": "a", "metadata": ' + b"[" * 70 + b"]" * 70 + b"}", 422,
         "nests deeper than 64 levels"),
        ("POST", "/score", [1, 2], 422, "must be a JSON object"),
        ("POST", "/score", {"rollout": {"input": "q"}, "metadata": {"current_step": 0}}, 422, "missing output"),
        ("POST", "/score", {"rollout": {"input": "q", "output": "a"}, "metadata": {"total_steps": 1.5}}, 422,
         "metadata.total_steps"),
        ("POST", "/score", {"rollout": {"input": "q", "output": "a"}, "extra": 1}, 422, "extra"),
        ("POST", "/score", {**ok, "metadata": {"current_step": 0, "high_level_goal": 7}}, 422,
         "metadata.high_level_goal"),
        ("POST", "/score", {**ok, "metadata": {"current_step": -1}}, 422, "metadata.current_step"),
        ("POST", "/score", {**ok, "metadata": {"current_step": "three"}}, 422, "must be an integer"),  # "3" is 3
        ("POST", "/score", {**ok, "metadata": {"current_step": 2.5}}, 422, "must be an integer"),
        ("POST", "/score", {**ok, "prompt": 5}, 422, "prompt"),
        ("POST", "/score", {"response": "a", "metadata": {"current_step": 0}}, 422, "missing input"),
        ("POST", "/score", {**ok, "step": 2}, 422, "step is 2 but metadata.current_step is 0"),
        ("POST", "/score", {**ok, "id": True}, 422, "id"),
        ("POST", "/score", b'{"prompt": "q", "prompt": "r", "response": "a", "metadata": {"current_step": 0}}', 422,
         "prompt"),
        ("POST", "/score", {**ok, "metadata": "step 0"}, 422, "metadata"),
        ("GET", "/score", None, 405, "takes POST"),
        ("GET", "/nowhere", None, 404, "no route GET /nowhere"),
        ("POST", "/complete", {}, 409, "no step is open"),  # the reference's /complete, as a client may send it
        ("POST", "/complete", {"step": 5}, 409, "step 5 has no rollouts"),
        ("POST", "/complete", {"step": 0, "extra": 1}, 422, "extra"),
        ("POST", "/complete", {"step": 0, "shard": 2, "shards": 2}, 422, "shard 2 of 2"),
        ("POST", "/complete", b"", 409, "no step is open"),
        ("POST", "/discard", {"step": 4}, 404, "step 4 is not open"),
        ("POST", "/discard", {"step": 4, "opened_before": True}, 422, "opened_before"),
        ("POST", "/discard", {"step": 4, "opened_before": "1764000000"}, 422, "opened_before"),
        ("GET", "/rubric_status/wait?step=abc", None, 422, "step: expected an integer"),
        ("GET", "/rubric_status/wait?step=0&timeout=-1", None, 422, "timeout"),
        ("GET", "/rubric_status/wait?timeout=soon", None, 422, "timeout"),
        ("GET", "/rubric_status?step=7", None, 404, "step 7 has no rollouts"),
        ("GET", "/rubric_status", None, 404, "no step is complete yet"),
    ]
    with served(run, sim) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        for method, path, payload, status, reason in cases:
            content = payload if isinstance(payload, bytes) or payload is None else orjson.dumps(payload)
            answer = http.request(method, path, content=content)
            assert answer.status_code == status, (method, path, payload, answer.text)
            assert answer.headers["content-type"] == "application/json"
            assert reason in answer.json()["error"], (method, path, answer.json())
        assert http.request("GET", "/score").headers["allow"] == "POST"
        # A body announced over the limit is refused before it is read.
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=10) as raw:
            raw.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 70000000\r\n\r\n")
            head = read_answer(raw)
        assert head.startswith("HTTP/1.1 413") and "over the 67108864-byte limit" in head
        # A connection a client keeps for its next request is kept longer than the clients' own idle expiry (httpx
        # drops one after 5 s): at uvicorn's 5 s the server closed it as a client sent on it ("Server disconnected
        # without sending a response", a rollout of a step lost), a trainer's first request after 5 s of training.
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=10) as raw:
            asked = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            raw.sendall(asked)
            assert read_answer(raw).startswith("HTTP/1.1 200")
            time.sleep(6)
            raw.sendall(asked)
            again = raw.recv(4096)
            assert again.startswith(b"HTTP/1.1 200"), again
        # An id names one rollout of a step: the same id with other content is a conflict.
        assert http.post("/score", json={**ok, "id": "x"}).status_code == 200
        clash = http.post("/score", json={**ok, "id": "x", "response": "5"})
        assert clash.status_code == 409 and "id 'x' already names another rollout of step 0" in clash.json()["error"]
        assert 'POST /discard {"step": 0}' in clash.json()["error"] and "samples of one prompt" in clash.json()["error"]
        # A step another process writes is a conflict naming it, and the server's open step is one for others.
        with locks.exclusive(RunDir(run).step_lock_path(1), "step 1", role="score"):
            held = http.post("/score", json={**ok, "metadata": {"current_step": 1}})
        assert held.status_code == 409 and f"pid {os.getpid()}" in held.json()["error"]
        # Step 3 is scored with version 2 at most, which the evolution of step 0 writes: step 0 must be completed.
        early = http.post("/score", json={**ok, "metadata": {"current_step": 3}})
        assert early.status_code == 409 and "step 0 is still open: POST /complete for it first" in early.json()["error"]
        other = invoke("score", step_file(0), "--run", run, "--step", "0", env=judge_env(sim))
        assert other.exit_code == 3 and "amaris serve --run" in other.stderr
        assert http.get("/health").json()["open_steps"] == [0]
        open_step = invoke("rewards", "--run", run, "--step", "0")
        assert open_step.exit_code == 2 and "step 0 is open in `amaris serve`" in open_step.stderr, open_step.stderr
        # Step 1 never came: the client is told to send it, not to run commands on the server's run.
        assert http.post("/complete", json={"step": 0}).status_code == 200
        gap = http.post("/score", json={**ok, "metadata": {"current_step": 3}})
        assert gap.status_code == 409 and "send step 1 first (POST /score" in gap.json()["error"], gap.json()
        assert "amaris loop" not in gap.json()["error"] and "--rubric-version" not in gap.json()["error"]
        # A complete step takes no more: a trainer resumed from a checkpoint is told where its steps go on.
        assert http.get("/rubric_status/wait", params={"step": 0, "timeout": 60}).json()["state"] == "done"
        resumed = http.post("/score", json={**ok, "id": "y", "response": "6"})
        assert resumed.status_code == 409 and "step 0 is complete" in resumed.json()["error"]
        assert "resumed from a checkpoint" in resumed.json()["error"] and "number its steps from 1 on" in resumed.json()["error"]
        # A step the crashed run left open is named too: the next step waits for its completion.
        assert http.post("/score", json={**ok, "id": "z", "metadata": {"current_step": 1}}).status_code == 200
        resumed = http.post("/score", json={**ok, "id": "y", "response": "6"}).json()["error"]
        assert "number its steps from 2 on (after the run's last step), once step 1 that it left open" in resumed, resumed


def test_a_request_from_a_web_page_changes_nothing(tmp_path, sim) -> None:
    """A page in a browser beside the server can send a POST with a text/plain body (no CORS preflight) to
    127.0.0.1; the browser marks it with an Origin header, which no trainer's client sends. Such requests
    are refused before their body is read: no rollout of theirs is judged or written, no step is completed."""
    run = new_run(tmp_path, "web")
    ok = {"id": "page", "prompt": "What is 2+2?", "response": "Final answer: 4", "metadata": {"current_step": 0}}
    page = {"origin": "https://attacker.example", "content-type": "text/plain;charset=UTF-8"}
    with served(run, sim) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        for path, payload in (("/score", ok), ("/complete", {"step": 0}), ("/discard", {"step": 0})):
            answer = http.post(path, content=orjson.dumps(payload), headers=page)
            assert answer.status_code == 403 and "Origin header" in answer.json()["error"], (path, answer.text)
        assert http.get("/health", headers=page).status_code == 403
        assert http.get("/health").json()["open_steps"] == []
        assert not (run / "steps").exists() or not list((run / "steps").rglob("rollouts.jsonl"))
        assert http.post("/score", content=orjson.dumps(ok), headers={"content-type": "text/plain"}).status_code == 200


def test_a_judge_failure_is_an_explicit_failure_never_a_made_up_score(tmp_path, sim_factory) -> None:
    failing = sim_factory(agent_fault_rate={"scorer": 0.4})
    run = new_run(tmp_path, "fail")
    with served(run, failing) as server:
        client = AmarisClient(server.url)
        answers = [client.score(step=0, **body(r)) for r in rows(0)]
        client.rollouts_complete(0)
        status = client.rubric_updated(0, timeout=120)
    failed = [a for a in answers if a.status == "failed"]
    assert failed and len(failed) < len(answers)
    assert all(a.score is None and a.error for a in failed)
    assert all(a.score is not None for a in answers if a.status == "scored")
    assert exported(run, 0) == {a.id: a.score for a in answers}
    # --on-error fail: nothing is learned from the step, but the trainer, answered already, goes on: the step
    # evolves as skipped (policy.py, `carry`) and the next rubric version is the one before it.
    assert status.state == "done" and status.error is None and "could not be judged" in (status.skipped or "")
    assert (run / "rubrics" / "step-000001.json").exists() and not (run / "steps" / "000000" / "analyses.jsonl").exists()

    run = new_run(tmp_path, "neutral")
    with served(run, failing, "--on-error", "neutral") as server:
        neutral = [AmarisClient(server.url).score(step=0, **body(r)) for r in rows(0)[:8]]
    assert {(a.status, a.score) for a in neutral if a.status == "failed"} == {("failed", 0.5)}

    refused = sim_factory(agent_faults={"scorer": "401"})
    run = new_run(tmp_path, "refused")
    with served(run, refused) as server:
        # The server's first judgement imports the SDK: seconds on a loaded machine, past httpx's default 5 s.
        answer = httpx.post(f"{server.url}/score", json={**body(rows(0)[0]), "metadata": {"current_step": 0}},
                            timeout=60)
        validation = httpx.post(f"{server.url}/validate", json={**body(rows(0)[1]), "metadata": {"current_step": 0}},
                                timeout=60)
    assert answer.status_code == validation.status_code == 502 and "401" in answer.json()["error"]
    # which request it was, as the server's own refusals say (a trainer sends many at once)
    assert (answer.json()["step"], answer.json()["id"]) == (0, rows(0)[0]["id"]), answer.json()
    assert (validation.json()["step"], validation.json()["id"]) == (0, rows(0)[1]["id"]), validation.json()


def test_a_server_whose_key_was_refused_tries_the_endpoint_again_after_recheck_after(tmp_path, sim_factory) -> None:
    """A 401 stops the judgements of a command for good, but a server stays up while its endpoint is fixed: for
    --recheck-after seconds /score fails at once, without asking the endpoint, then the server tries it again."""
    judge = sim_factory(agent_faults={"scorer": "401"})
    run = new_run(tmp_path, "recheck")
    row = {**body(rows(0)[0]), "metadata": {"current_step": 0}}
    with served(run, judge, "--recheck-after", "2") as server:
        refused = httpx.post(f"{server.url}/score", json=row, timeout=60)
        asked = judge.stats["requests"]
        held = httpx.post(f"{server.url}/score", json=row, timeout=60)
        assert judge.stats["requests"] == asked  # within the hold: not sent
        del judge.config.agent_faults["scorer"]  # the key is fixed
        time.sleep(2.2)
        answer = AmarisClient(server.url).score(step=0, **{**body(rows(0)[0]), "metadata": {"current_step": 0}})
        # Its operator reads the refusal once, and the endpoint's return.
        said = server.wait_for_line(r"answers again, \d+s after it refused a request")
        told = server.stderr
    assert refused.status_code == held.status_code == 502
    assert "401" in refused.json()["error"] and "401" in held.json()["error"]
    assert answer.status == "scored" and answer.score is not None
    assert told.count("judgements fail at once for 2s (--recheck-after)") == 1 and "HTTP 401" in told, told
    assert told.index("--recheck-after") < told.index(said)


def test_a_client_that_disconnects_mid_request_loses_nothing(tmp_path, sim_factory) -> None:
    judge = sim_factory(latency=1.0)
    run = new_run(tmp_path, "disconnect")
    row = rows(0)[0]
    payload = orjson.dumps({**body(row), "metadata": {**row["metadata"], "current_step": 0}})

    def judged() -> int:
        """Scorer requests that carried the rollout (the analyzer's, sent as soon as it is judged, are not
        judgements)."""
        texts = [" ".join(str(m.get("content")) for m in r["messages"]) for r in judge.requests
                 if rules.agent_of(r["messages"]) == "scorer"]
        return sum(1 for text in texts if row["output"] in text)

    def scorer_calls() -> list[str]:
        """The sources of the run's scorer calls: a judgement answered from this run's own log (which a
        repeat of the request would be) never reaches the judge but is a `cache` line here."""
        return [json.loads(line)["source"] for line in (run / "calls.jsonl").read_text().splitlines()
                if json.loads(line)["agent"] == "scorer"]

    with served(run, judge) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            time.sleep(0.3)  # the judge is still answering
        journal = run / ".serve" / "step-000000.jsonl"
        wait_until(lambda: journal.exists() and row["id"] in journal.read_text(), what="the rollout to be journaled")
        client = AmarisClient(server.url)
        assert client.health().status == "ok"
        assert judged() == 1 and scorer_calls() == ["model"]
        again = client.score(step=0, **body(row))
        # Answered from the journal, not judged again: no second request at the judge nor from the cache.
        assert judged() == 1 and scorer_calls() == ["model"], "the repeat was judged again"
        # A waiting client that goes away stops only its own wait.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"GET /rubric_status/wait?step=0&timeout=60 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            time.sleep(0.3)
        assert client.health().status == "ok"
        assert client.rollouts_complete(0).rollouts == 1
        assert client.rubric_updated(0, timeout=0).state == "evolving"
    assert exported(run, 0) == {row["id"]: again.score}


# --- Ctrl-C / SIGTERM and restart ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Steps 0-1 of the example files with lag 1, by the commands."""
    with SimJudge() as judge:
        run = new_run(tmp_path_factory.mktemp("uninterrupted"), "run")
        return async_by_commands(run, [step_file(0), step_file(1)], judge)


def test_sigterm_mid_step_then_a_restart_resumes_to_the_uninterrupted_result(tmp_path, sim_factory,
                                                                          uninterrupted) -> None:
    judge = sim_factory(latency=0.3)
    env = serve_env(judge)
    run = new_run(tmp_path, "restarted")
    lines = [{**r, "metadata": {**r["metadata"], "current_step": 0}} for r in rows(0)]  # raw lines of the file
    server = start_server(run, env)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            before = [http.post("/score", json=line).json() for line in lines[:8]]
            inflight: list[httpx.Response] = []
            sender = threading.Thread(target=lambda: inflight.append(http.post("/score", json=lines[8])))
            sender.start()
            wait_until(lambda: any(lines[8]["output"] in m.get("content", "") for r in judge.requests
                                   for m in r["messages"]), what="the judge to be answering line 8")
            assert server.stop() == 0
            sender.join(30)
    finally:
        server.stop()
    assert inflight and inflight[0].status_code == 200, "the request in flight was finished before the server stopped"
    assert not (run / "steps/000000/rollouts.jsonl").exists() and locks.holder(RunDir(run).step_lock_path(0)) is None
    assert "step(s) 0 open" in server.stderr

    fast = sim_factory()  # the same rules without latency: what the first judge answered is not asked again
    with served(run, fast) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        assert "step 0: open again with the 9 rollout(s) judged before the restart" in server.stderr
        assert http.post("/score", json=lines[0]).json() == before[0], "a rollout judged before the restart"
        for line in lines[9:]:
            assert http.post("/score", json=line).status_code == 200
        assert http.post("/complete", json={"step": 0}).json()["rollouts"] == 16
        for line in rows(1):
            assert http.post("/score", json={**line, "metadata": {**line["metadata"], "current_step": 1}}).status_code == 200
        assert http.post("/complete", json={"step": 1}).status_code == 200
        assert http.get("/rubric_status/wait", params={"step": 1, "timeout": 120}).json()["state"] == "done"
    assert comparable(outputs(run)) == comparable(outputs(uninterrupted))


# --- red team -----------------------------------------------------------------------------------------------
# `amaris serve`: what a hostile client, a stalled client, an operator who kills and restarts the server,
# and a retrying trainer do to it.
#
# Every test runs the real server as a subprocess on 127.0.0.1 against the sim-judge (tests/served.py) and
# is bounded in time: a server that hangs is killed and the test fails, it never waits for `--wait`.


def lines(step: int, n: int | None = None) -> list[dict[str, Any]]:
    """Lines of the example step file as /score bodies (they carry ids)."""
    return [{**r, "metadata": {**r["metadata"], "current_step": step}} for r in rows(step)[:n]]


def port_of(server: Served) -> int:
    return int(server.url.rsplit(":", 1)[1])


def stored_ids(run: Path, step: int) -> list[str]:
    return [r["id"] for r in read_jsonl(run / "steps" / f"{step:06d}" / "rollouts.jsonl")]


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
            raw.sendall(b"POST /score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
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
    """Under --on-error fail --failed-step stop a step with failed scores ends `failed`. A trainer that retries
    rollouts of it (same id) gets their answers; each retry used to re-read the journal, say `its evolution
    resumes` and start `amaris evolve` again (status flipping back to `evolving`)."""
    judge = sim_factory(agent_fault_rate={"scorer": 0.4})
    run = new_run(tmp_path, "failed")
    posted = lines(0, 6)
    with served(run, judge, "--failed-step", "stop") as server, httpx.Client(base_url=server.url, timeout=60) as http:
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


def test_a_request_addressed_to_another_name_gets_nothing_from_a_server_on_this_machine(tmp_path, sim) -> None:
    """DNS rebinding: a web page points a name it controls at 127.0.0.1 and reads the server's GET answers as
    same-origin, without an Origin header. Its requests carry that name as their Host; a server bound to
    127.0.0.1 answers only requests addressed to a loopback address or localhost."""
    run = new_run(tmp_path, "rebind")
    ok = {"id": "page", "prompt": "What is 2+2?", "response": "Final answer: 4", "metadata": {"current_step": 0}}
    with served(run, sim) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        port = server.url.rsplit(":", 1)[1]
        for name in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.attacker.example:{port}"):
            for method, path in (("GET", "/health"), ("GET", "/rubric_status?step=0"), ("POST", "/score")):
                answer = http.request(method, path, headers={"host": name}, json=ok if method == "POST" else None)
                assert answer.status_code == 403, (name, path, answer.text)
                assert f"a request for host {name!r} is refused" in answer.json()["error"], answer.text
        assert not (run / "steps").exists() or not list((run / "steps").rglob("rollouts.jsonl"))
        for name in (f"localhost:{port}", f"LOCALHOST:{port}", f"127.0.0.1:{port}", "127.0.0.1"):
            assert http.get("/health", headers={"host": name}).status_code == 200, name
        assert http.post("/score", json=ok).status_code == 200


@pytest.mark.parametrize(("bound", "header", "refused"), [
    ("127.0.0.1", b"127.0.0.1:8000", False), ("127.0.0.1", b"localhost", False), ("127.0.0.1", b"[::1]:80", False),
    ("::1", b"[::1]:8000", False), ("localhost", b"127.0.0.2:9", False), ("127.0.0.1", None, False),
    ("127.0.0.1", b"evil.example:8000", True), ("127.0.0.1", b"localhost.evil.example", True),
    ("127.0.0.1", b"[::ffff:8.8.8.8]:80", True), ("127.0.0.1", b"", True), ("::1", b"evil.example", True),
    ("0.0.0.0", b"evil.example:8000", False), ("10.1.2.3", b"anything", False),
])
def test_which_host_headers_a_server_bound_to_this_machine_refuses(bound, header, refused) -> None:
    from amaris_cli.serve.hosts import foreign_host

    assert (foreign_host(bound, header) is not None) is refused


def test_stopping_the_server_drops_the_analyses_of_a_step_that_is_settling(monkeypatch) -> None:
    """A step completed just before a stop waits in `settle` for its analyses (under a steady /score most of them
    wait for /complete): stop() drops them as it drops an open step's (the evolution asks again on restart), so
    that the stop does not wait for them, nor leave them running against a closing client."""
    started: list[int] = []

    async def slow_analysis(kit, rubric, rollout, record, step):  # noqa: ANN001, ANN202 - analyze_rollout's signature
        started.append(step)
        await asyncio.sleep(60)

    new_early, record = early_analyses_with(monkeypatch, slow_analysis)

    async def scenario() -> None:
        early = new_early()
        for _ in range(3):
            early.start(0, None, record)  # type: ignore[arg-type]
        settling = asyncio.create_task(early.settle(0))
        while len(started) < 3:
            await asyncio.sleep(0.001)
        await asyncio.wait_for(early.stop(), 2)
        await asyncio.wait_for(settling, 2)  # its analyses were dropped: nothing left to wait for
        assert early._in_flight == 0 and not early._urgent and not early._waiting and not early._by_step
        # A settle cancelled itself (the server's task that waits for it, at a stop) leaves nothing of the step.
        early.start(5, None, record)  # type: ignore[arg-type]
        settling = asyncio.create_task(early.settle(5))
        while len(started) < 4:
            await asyncio.sleep(0.001)
        settling.cancel()
        await asyncio.gather(settling, return_exceptions=True)
        assert early._in_flight == 0 and not early._urgent and not early._waiting and not early._by_step

    asyncio.run(scenario())


def test_a_validation_retry_while_its_judgement_runs_waits_for_it(tmp_path, sim_factory) -> None:
    """A client whose /validate timed out while the judge answered sends it again: the retry was judged again and
    kept twice, which counted the rollout twice in the step's validation figures."""
    run = new_run(tmp_path, "validate-retry")
    row = lines(0, 1)[0]
    judge = sim_factory(latency=1.0)
    with served(run, judge) as server:
        with httpx.Client(base_url=server.url, timeout=0.3) as impatient, pytest.raises(httpx.TimeoutException):
            impatient.post("/validate", json=row)
        with httpx.Client(base_url=server.url, timeout=60) as http:
            again = http.post("/validate", json=row)
            later = http.post("/validate", json=row)
    assert again.status_code == later.status_code == 200 and again.json() == later.json(), (again.text, later.text)
    kept = (run / "validation" / "step-000000.jsonl").read_text().splitlines()
    assert len(kept) == 1, kept
    judged = [r for r in judge.requests if r["messages"][0]["content"].startswith("You are the scorer")]
    assert len(judged) == 1


def test_validation_rollouts_are_judged_in_no_step(tmp_path, sim) -> None:
    """POST /validate: judged as a training rollout of its step would be (same rubric version, same answer),
    but it opens no step, takes no place in one (--rollouts-per-step does not count it) and is kept apart."""
    run = new_run(tmp_path, "validate")
    training, validation = lines(0, 4), lines(0)[4:7]
    with served(run, sim, "--rollouts-per-step", 4) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        early = [http.post("/validate", json=line).json() for line in validation]
        assert http.get("/health").json()["open_steps"] == []
        answers = [http.post("/score", json=line).json() for line in training[:3]]
        stepless = {k: v for k, v in validation[0].items() if k not in ("step", "metadata")}
        unnamed = http.post("/validate", json={**stepless, "id": "unnamed"}).json()  # names no step: the open step's
        # A client's retry of a validation rollout (same id and content) is answered as it was, not counted again.
        retried = http.post("/validate", json=validation[1]).json()
        answers.append(http.post("/score", json=training[3]).json())
        assert http.get("/rubric_status/wait", params={"step": 0, "timeout": 60}).json()["state"] == "done"
        bad = http.post("/validate", json={"prompt": "p", "metadata": {"current_step": 0}})
        # A fifth rollout of step 0: the trainer's batch is larger than --rollouts-per-step, and it is told so.
        over = http.post("/score", json={**stepless, "id": "fifth", "metadata": {"current_step": 0}})
        assert over.status_code == 409 and "(--rollouts-per-step)" in over.json()["error"], over.text
        again = http.post("/score", json={**stepless, "metadata": {"current_step": 1}}).json()
        # A final evaluation after the last training step: a step with validation rollouts only.
        final = http.post("/validate", json={**stepless, "id": "final", "metadata": {"current_step": 2}})
        assert final.status_code == 200, final.text
    assert bad.status_code == 422 and bad.json()["error"].startswith("POST /validate: ") and "response" in bad.json()["error"]
    assert stored_ids(run, 0) == [line["id"] for line in training]
    assert [a["status"] for a in answers] == ["scored"] * 4
    assert unnamed["step"] == 0 and unnamed["score"] == early[0]["score"]
    kept = [json.loads(x) for x in (run / "validation" / "step-000000.jsonl").read_text().splitlines()]
    assert [e["rollout"]["id"] for e in kept] == [line["id"] for line in validation] + ["unnamed"]
    assert retried == early[1]
    assert [e["record"]["reward"] for e in kept] == [a["score"] for a in early] + [unnamed["score"]]
    assert {e["record"]["rubric_version"] for e in kept} == {0}
    # The same rollout as training, at step 1 (also version 0 under lag 1): the same score.
    assert again.get("rubric_version") == 0 and again["score"] == early[0]["score"], again
    # inspect and the report show the validation apart from the step, with its judge calls in a row of their own.
    shown = invoke("inspect", run, "--json")
    assert shown.exit_code == 0, shown.stderr
    data = json.loads(shown.stdout)
    rewards = [e["record"]["reward"] for e in kept]
    assert data["validation"][0] == {"step": 0, "rollouts": 4, "failed": 0, "rubric_versions": [0],
                                     "mean_reward": round(statistics.fmean(rewards), 6),
                                     "std_reward": round(statistics.pstdev(rewards), 6)}
    assert data["steps"][0]["rollouts"] == 4
    assert data["usage"]["0"]["validation"]["calls"] == 4
    assert data["usage"]["0"]["scorer"]["calls"] == 4, "the step's scorer calls are its training rollouts'"
    text = " ".join(invoke("inspect", run, "--step", 0).stderr.split())
    assert "validation rollouts per step" in text and "validation: 4 rollouts judged in no step, 0 failed" in text
    overview, _ = collect(RunDir(run))
    assert [(v.step, v.n, v.mean) for v in overview.validation][0] == (0, 4, data["validation"][0]["mean_reward"])
    assert [v["step"] for v in data["validation"]] == [0, 2]
    only = invoke("inspect", run, "--step", 2)
    assert only.exit_code == 2 and "step 2 has validation rollouts only (POST /validate)" in only.stderr, only.stderr
    # A file of another name is not a step's: step 0 is read once, from the file validation_path names.
    shutil.copy(run / "validation" / "step-000000.jsonl", run / "validation" / "step-0000000.jsonl")
    assert [v["step"] for v in json.loads(invoke("inspect", run, "--json").stdout)["validation"]] == [0, 2]
