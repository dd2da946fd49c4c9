"""A training run survives its judge: an outage is named, waited out within `llm.outage_budget`, and when it
outlasts the budget the step evolves as skipped (the rubric carried forward) under `--on-error skip|neutral`,
so training goes on, and the run replays as it ran.

Every judge here is real on 127.0.0.1: the sim-judge (stopped and started again on the same port for an
outage), or a few lines of socket code for what the sim-judge cannot do (reset every connection, accept and
never answer). Nothing here mocks the SDK or the HTTP layer.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from amaris_cli.config import load_settings
from amaris_cli.llm import client as client_module
from amaris_cli.llm.client import OUTAGE_MAX_DELAY_S, LLMClient
from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from tests.conftest import (
    EXAMPLES,
    FAST_MEMORY,
    PLANTED_KEY,
    TEST_CONFIG,
    clean_env,
    free_port,
    invoke,
    judge_env,
    outputs,
    process_env,
    read_jsonl,
    wait_until,
    write_jsonl,
)
from tests.served import serve_env, start_server
from tests.test_online import finish, holds_step, start

ROLLOUT = {"id": "r1", "input": "What is 6 x 7?", "output": "6 x 7 = 42. Final answer: 42", "answer": "42"}


# The [llm] lines of the tests of looks at a judge after a step spent its (short) outage budget.
LOOKS = "outage_budget = 0.3\nretry_base_delay = 0.01\nretry_max_delay = 10\n"


def direct_client(tmp_path: Path, base_url: str, llm: str, agent: str) -> LLMClient:
    """An LLMClient driven directly, without a command: `llm` and `agent` are the lines of the config's [llm] and
    [agents.default] sections (the endpoint's base_url added). Made inside the test's event loop."""
    config = tmp_path / "c.toml"
    config.write_text(f"[llm]\n{llm}[agents.default]\nbase_url = \"{base_url}\"\n{agent}")
    return LLMClient(load_settings(config_file=config, environ={}), environ={"OPENAI_API_KEY": PLANTED_KEY})



def step_file(step: int) -> Path:
    return EXAMPLES / "math" / f"step-{step % 6:03d}.jsonl"


def run_with(tmp_path: Path, name: str = "run", budget: float = 0, extra: str = "") -> Path:
    config = tmp_path / f"{name}.toml"
    config.write_text(TEST_CONFIG.replace("outage_budget = 0", f"outage_budget = {budget}") + extra)
    run = tmp_path / name
    assert invoke("init", run, "--config", config).exit_code == 0
    return run


class RawServer:
    """Accepts connections on 127.0.0.1 and does one thing to each: `reset` (RST at once), `silent` (read the
    request, never answer) or `http` (answer whatever arrives, a TLS hello too, with a plain HTTP 400, as a
    plain-HTTP server does)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            if self.mode == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()
            elif self.mode == "http":
                conn.settimeout(2)
                try:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass
                conn.close()
            else:
                self.held.append(conn)

    def stop(self) -> None:
        self.stopping = True
        self.thread.join(5)
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def raw() -> Iterator[list[RawServer]]:
    started: list[RawServer] = []
    yield started
    for server in started:
        server.stop()


def score_one(run: Path, tmp_path: Path, base_url: str, *extra: str, rollouts: Path | None = None, **env: str):
    rollouts = rollouts or write_jsonl(tmp_path / "r.jsonl", [ROLLOUT])
    return invoke("score", rollouts, "--run", run, "--step", "0", "--on-error", "skip", "--json", *extra,
                  env={"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": PLANTED_KEY, "AMARIS_SCORER_TIMEOUT": "1", **env})


@pytest.mark.parametrize("cause", ["refused", "reset", "timeout", "dns"])
def test_each_way_of_not_reaching_the_judge_is_named(tmp_path: Path, raw: list[RawServer], cause: str) -> None:
    """A judge with nothing listening was reported as "timed out after 120s (raise agents.scorer.timeout ...)":
    the wrong cause and the wrong advice."""
    if cause == "refused":
        url = f"http://127.0.0.1:{free_port()}/v1"
    elif cause == "dns":
        url = "http://judge.invalid:8000/v1"
    else:
        raw.append(RawServer("reset" if cause == "reset" else "silent"))
        url = f"http://127.0.0.1:{raw[-1].port}/v1"
    run = run_with(tmp_path)
    result = score_one(run, tmp_path, url)
    assert result.exit_code == 0, result.stderr
    [record] = read_jsonl(run / "steps/000000/scores.jsonl")
    error = record["error"]
    expected = {"refused": "connection refused by 127.0.0.1", "reset": "closed the connection before answering",
                "timeout": "timed out after 1s", "dns": "does not resolve"}[cause]
    assert record["status"] == "failed" and expected in error, error
    assert ("raise agents.scorer.timeout" in error) == (cause == "timeout"), error
    assert json.loads(result.stdout)["usage"]["scorer"]["faults"] == {cause: 4}  # max_attempts of the test config


def test_a_tls_failure_is_a_configuration_error_named_at_once(tmp_path: Path, raw: list[RawServer]) -> None:
    """https:// to a plain-HTTP server: no retry can help, so the command stops (exit 2) naming the handshake."""
    raw.append(RawServer("http"))
    run = run_with(tmp_path)
    result = score_one(run, tmp_path, f"https://127.0.0.1:{raw[-1].port}/v1")
    assert result.exit_code == 2, result.stderr
    assert "TLS handshake" in result.stderr and "https://" in result.stderr


def test_a_judge_back_within_the_budget_costs_time_not_rewards(tmp_path: Path) -> None:
    port = free_port()
    run = run_with(tmp_path, budget=60)
    judges: list[SimJudge] = []
    timer = threading.Timer(1.5, lambda: judges.append(SimJudge().start_in_thread(port=port)))
    timer.start()
    try:
        result = invoke("score", step_file(0), "--run", run, "--step", "0", "--on-error", "neutral",
                        env={"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": PLANTED_KEY})
    finally:
        timer.join()
        for judge in judges:
            judge.stop()
    assert result.exit_code == 0, result.stderr
    assert all(r["status"] == "scored" for r in read_jsonl(run / "steps/000000/scores.jsonl"))
    assert "unreachable since" in result.stderr and "connection refused" in result.stderr, result.stderr
    assert "answers again, after" in result.stderr, result.stderr


def test_an_outage_that_starts_in_the_middle_of_a_step_costs_time_not_rewards(tmp_path: Path) -> None:
    """The judge stops while requests are in flight and comes back within the budget: the requests it was
    answering when it stopped counted the answers that came just before as "the endpoint answers others", spent
    their attempts in the first moment of the outage, and failed (exit 4 under the default policy)."""
    port = free_port()
    run = run_with(tmp_path, budget=60)
    judges = [SimJudge(SimJudgeConfig(latency=0.2)).start_in_thread(port=port)]

    def outage() -> None:  # once some rollouts are judged, the judge goes down for 2 s
        wait_until(lambda: judges[0].stats["requests"] >= 6, timeout=60, what="six requests")
        judges[0].stop()
        time.sleep(2)
        judges.append(SimJudge(SimJudgeConfig(latency=0.2)).start_in_thread(port=port))

    thread = threading.Thread(target=outage)
    thread.start()
    try:
        result = invoke("score", step_file(0), "--run", run, "--step", "0", "--concurrency", "4",
                        env={"OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "OPENAI_API_KEY": PLANTED_KEY})
    finally:
        thread.join()
        for judge in judges:
            judge.stop()
    assert result.exit_code == 0, result.stderr
    assert [r["status"] for r in read_jsonl(run / "steps/000000/scores.jsonl")] == ["scored"] * 16
    assert "answers again, after" in result.stderr, result.stderr


@pytest.mark.parametrize("kind", ["html", "error_body", "529"])
def test_bad_answers_for_a_while_from_a_judge_that_answered_are_waited_out_as_an_outage(tmp_path: Path,
                                                                                      kind: str) -> None:
    """A proxy's maintenance page (200 text/html), a 200 carrying an error object, an "overloaded" 529: from a
    judge that has answered this run's completions, on every request for a while, they are an outage of it or of
    a proxy in front of it, waited out within the budget. The page stopped the step as a wrong base URL, the
    others failed its rollouts after max_attempts (the 529 at once), and the online run ended two steps later."""
    run = run_with(tmp_path, budget=60)
    with SimJudge() as judge:
        env = judge_env(judge)
        assert invoke("score", step_file(0), "--run", run, "--step", "0", env=env).exit_code == 0
        judge.config.agent_faults["scorer"] = kind

        def bad_for_a_while() -> None:  # from the first bad answer on: a fixed delay raced the score's start under load
            wait_until(lambda: judge.stats[f"fault:{kind}"] > 0, timeout=60, what="the first bad answer")
            time.sleep(1.5)
            judge.config.agent_faults.pop("scorer")

        thread = threading.Thread(target=bad_for_a_while)
        thread.start()
        try:
            result = invoke("score", step_file(1), "--run", run, "--step", "1", "--lag", "1", env=env)
        finally:
            thread.join()
    assert result.exit_code == 0, result.stderr
    assert judge.stats[f"fault:{kind}"] > 0
    assert [r["status"] for r in read_jsonl(run / "steps/000001/scores.jsonl")] == ["scored"] * 16
    assert "answers again, after" in result.stderr, result.stderr


def test_the_budget_bounds_the_wait_and_the_policy_decides_the_rewards(tmp_path: Path) -> None:
    run = run_with(tmp_path, budget=1)
    started = time.monotonic()
    result = invoke("score", step_file(0), "--run", run, "--step", "0", "--on-error", "neutral",
                    env={"OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1", "OPENAI_API_KEY": PLANTED_KEY})
    assert time.monotonic() - started < 20
    assert result.exit_code == 0, result.stderr
    assert "has been unreachable for 1s of this step" in result.stderr, result.stderr
    rewards = json.loads(invoke("rewards", "--run", run, "--step", "0", "--format", "list").stdout)
    assert rewards == [0.5] * 16


@pytest.mark.timeout(120)
def test_a_judge_that_never_answers_costs_the_budget_not_a_timeout_per_request(tmp_path: Path,
                                                                                raw: list[RawServer]) -> None:
    """A judge that accepts connections and never answers (a hung server): once the step's budget was spent,
    every request still made its max_attempts attempts of one `timeout` each, and one at a time (an endpoint that
    never answered is asked one request at a time): 34 attempts, 37 s for 8 rollouts with a 2 s budget and a 1 s
    timeout, which at the defaults (120 s, 5 attempts, 256 rollouts) is 42 hours of a stalled training step."""
    raw.append(RawServer("silent"))
    run = run_with(tmp_path, budget=2)
    rows = [json.loads(line) for line in step_file(0).read_text().splitlines()][:8]
    result = score_one(run, tmp_path, f"http://127.0.0.1:{raw[-1].port}/v1", "--on-error", "neutral",
                       rollouts=write_jsonl(tmp_path / "eight.jsonl", rows))
    assert result.exit_code == 0, result.stderr
    records = read_jsonl(run / "steps/000000/scores.jsonl")
    assert len(records) == 8 and {r["status"] for r in records} == {"failed"} and {r["reward"] for r in records} == {0.5}
    assert all("unreachable for 2s of this step" in r["error"] and "timed out after 1s" in r["error"] for r in records)
    sent = json.loads(result.stdout)["usage"]["scorer"]["requests"]
    assert sent <= 6, sent  # the attempts within the budget (2 s of 1 s attempts, one at a time), then one probe


@pytest.mark.parametrize("header", ["Retry-After", "Retry-After-Ms"])
def test_a_judge_that_rate_limits_every_request_is_asked_again_when_it_said(tmp_path: Path, header: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge that answers every request with a 429 is an outage, and during one a request tries again at least
    every OUTAGE_MAX_DELAY_S to notice its end. It did so also when the 429 asked for longer (its Retry-After was
    cut to that interval): a provider counts the requests it refuses against the limit, so asking early prolongs
    it. The endpoint's wish is now kept, within retry_max_delay."""
    monkeypatch.setattr(client_module, "OUTAGE_MAX_DELAY_S", 0.1)  # the rule at the scale of a test
    after = "0.8" if header == "Retry-After" else "800"
    judge = SimJudge(SimJudgeConfig(fault_plan=["429"] * 3, retry_after=after, retry_after_header=header)).start_in_thread()
    try:
        config = tmp_path / "c.toml"
        config.write_text(TEST_CONFIG.replace("outage_budget = 0", "outage_budget = 60")
                          .replace("retry_max_delay = 0.05", "retry_max_delay = 10"))
        run = tmp_path / "run"
        assert invoke("init", run, "--config", config).exit_code == 0
        result = score_one(run, tmp_path, judge.base_url)
    finally:
        judge.stop()
    assert result.exit_code == 0, result.stderr
    [record] = read_jsonl(run / "steps/000000/scores.jsonl")
    assert record["status"] == "scored", record
    # the rollout's 3 refused tries and its answer; then the run's scale check (the answer scored 1s only)
    assert len(judge.arrivals) == 5
    gaps = [b - a for a, b in zip(judge.arrivals[:4], judge.arrivals[1:4], strict=False)]
    assert len(gaps) == 3 and min(gaps) >= 0.8, gaps


def test_a_retry_after_that_is_no_wait_is_ignored() -> None:
    for value in ("nan", "inf", "-5", "-1e9"):
        assert client_module._retry_after({"retry-after": value}) is None, value
        assert client_module._retry_after({"retry-after-ms": value}) is None, value
    assert client_module._retry_after({"retry-after": "2.5"}) == 2.5
    assert client_module._retry_after({"retry-after-ms": "250"}) == 0.25
    assert client_module._retry_after({"retry-after-ms": "nan", "retry-after": "3"}) == 3.0  # the other may say


def test_a_look_at_a_judge_that_rate_limits_after_the_budget_is_spent_waits_for_its_retry_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a step has spent its outage budget, one request at a time still looks whether the judge is back, at most
    one every OUTAGE_MAX_DELAY_S. A look answered by a 429 asking for longer was followed by the next one after that
    interval all the same: the one place left that did not keep the endpoint's Retry-After."""
    import asyncio

    from amaris_cli.models import QueriesAnswer

    monkeypatch.setattr(client_module, "OUTAGE_MAX_DELAY_S", 0.1)  # the rule at the scale of a test
    judge = SimJudge(SimJudgeConfig(fault_plan=["429"] * 100, retry_after=0.8)).start_in_thread()

    async def step() -> None:
        client = direct_client(tmp_path, judge.base_url, LOOKS, "max_attempts = 3\ntimeout = 2\n")
        await client.ask("scorer", [{"role": "user", "content": "q"}], QueriesAnswer, step=0, reasks=0)  # spends it
        deadline = time.monotonic() + 2.5
        asked = []
        for i in range(500):  # bounded: a new request every 20 ms for 2.5 s (a served step's rollouts arriving)
            if time.monotonic() > deadline:
                break
            asked.append(asyncio.ensure_future(
                client.ask("scorer", [{"role": "user", "content": f"q{i}"}], QueriesAnswer, step=0, reasks=0)))
            await asyncio.sleep(0.02)
        await asyncio.gather(*asked)
        await client.aclose()

    try:
        asyncio.run(step())
    finally:
        judge.stop()
    looks = judge.arrivals[2:]  # after the first request's two tries within the budget (0.3 s, 0.8 s apart)
    gaps = [b - a for a, b in zip(looks, looks[1:], strict=False)]
    assert looks and len(looks) <= 4 and all(g >= 0.8 for g in gaps), (len(judge.arrivals), gaps)



def test_a_look_after_the_budget_is_spent_does_not_wait_a_retry_after_before_failing(tmp_path: Path) -> None:
    """Once the step's outage budget is spent its requests fail ("its requests fail from now on"), bar a look now
    and then; a retry of the look would not be sent (_attempt refuses it unsent). A look refused with a 429 still
    slept the judge's Retry-After (up to llm.retry_max_delay, 30 s by default, deaf to stop_waiting) before that
    refusal: with a budget of 0.3 s, each look of the step took 5 s to fail. Nor is a look sent before the time
    the endpoint's last 429 asked for (it was, whatever any other request had been told)."""
    import asyncio

    from amaris_cli.models import QueriesAnswer

    judge = SimJudge(SimJudgeConfig(fault_plan=["429"] * 100, retry_after=5)).start_in_thread()

    async def look() -> tuple[float, str | None]:
        client = direct_client(tmp_path, judge.base_url, LOOKS, "max_attempts = 3\ntimeout = 2\n")
        await client.ask("scorer", [{"role": "user", "content": "q"}], QueriesAnswer, step=0, reasks=0)  # spends it
        started, sent = time.monotonic(), len(judge.arrivals)
        answer = await client.ask("scorer", [{"role": "user", "content": "q2"}], QueriesAnswer, step=0, reasks=0)
        await client.aclose()
        assert len(judge.arrivals) == sent  # no look before the 429's Retry-After, 5 s
        return time.monotonic() - started, answer.error

    try:
        took, error = asyncio.run(look())
    finally:
        judge.stop()
    assert error is not None and "unreachable for 0.3s of this step" in error, error
    assert took < 2, took  # one try; 5 s before


def test_a_request_started_after_a_retry_after_waits_for_it_too(tmp_path: Path) -> None:
    """A 429's Retry-After held back the request it refused, but a request started meanwhile (the next rollouts a
    trainer posts to serve, the next wave of a step) was sent at once, to be refused again: a provider counts those
    against the limit. Nothing goes to the endpoint before the time it asked for; a stop ends that wait at once."""
    import asyncio

    from amaris_cli.llm.client import OutageInterrupted
    from amaris_cli.models import QueriesAnswer

    def ask(client: LLMClient, text: str) -> asyncio.Future:
        return asyncio.ensure_future(client.ask("scorer", [{"role": "user", "content": text}], QueriesAnswer, step=0,
                                                reasks=0))

    async def refused(client: LLMClient) -> None:
        for _ in range(500):  # bounded: until the first request's 429 has come back
            if any(e.not_before > time.monotonic() for e in client._endpoints.values()):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no 429 came back")

    def client_of(judge: SimJudge) -> LLMClient:
        return direct_client(tmp_path, judge.base_url,
                             "outage_budget = 60\nretry_base_delay = 0.01\nretry_max_delay = 10\n",
                             "max_attempts = 3\ntimeout = 5\n")

    async def two(judge: SimJudge) -> None:
        client = client_of(judge)
        first = ask(client, "a")
        await refused(client)
        await asyncio.gather(first, ask(client, "b"))
        await client.aclose()

    async def stopped(judge: SimJudge) -> tuple[float, list[Any]]:
        client = client_of(judge)
        first = ask(client, "c")
        await refused(client)
        asyncio.get_running_loop().call_later(0.3, client.stop_waiting)
        started = time.monotonic()
        ended = await asyncio.gather(first, ask(client, "d"), return_exceptions=True)
        await client.aclose()
        return time.monotonic() - started, ended

    judge = SimJudge(SimJudgeConfig(fault_plan=["429"], retry_after=0.8)).start_in_thread()
    try:
        asyncio.run(two(judge))
    finally:
        judge.stop()
    assert len(judge.arrivals) == 3, judge.arrivals  # a (429), then b and a again, both after the wait
    assert min(judge.arrivals[1:]) - judge.arrivals[0] >= 0.8, judge.arrivals

    judge = SimJudge(SimJudgeConfig(fault_plan=["429"], retry_after=30)).start_in_thread()
    try:
        took, ended = asyncio.run(stopped(judge))
    finally:
        judge.stop()
    assert len(judge.arrivals) == 1, judge.arrivals  # d was never sent
    assert isinstance(ended[1], OutageInterrupted) and "asked to wait" in str(ended[1]), ended
    assert took < 5, took


def test_a_stop_ends_a_retry_s_backoff_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request whose answer was unusable (no outage) slept its backoff, up to llm.retry_max_delay (30 s by
    default) before each of its retries, deaf to a stop: `amaris serve` on SIGTERM held the shutdown that long
    for it. The stop now ends the wait; the request is not judged (503 from serve), as in an outage."""
    import asyncio

    from amaris_cli.llm.client import OutageInterrupted
    from amaris_cli.models import QueriesAnswer

    monkeypatch.setattr(client_module.random, "uniform", lambda low, high: high)  # the backoff's jitter at its top
    judge = SimJudge(SimJudgeConfig(fault_plan=["malformed"])).start_in_thread()

    async def stopped() -> float:
        client = direct_client(tmp_path, judge.base_url, "retry_base_delay = 20\nretry_max_delay = 20\n",
                               "max_attempts = 3\ntimeout = 5\n")
        asyncio.get_running_loop().call_later(0.5, client.stop_waiting)
        started = time.monotonic()
        try:
            with pytest.raises(OutageInterrupted, match="waited to be retried"):
                await asyncio.wait_for(client.ask("scorer", [{"role": "user", "content": "q"}], QueriesAnswer,
                                                  step=0, reasks=0), 8)
        finally:
            await client.aclose()
        return time.monotonic() - started

    try:
        took = asyncio.run(stopped())
    finally:
        judge.stop()
    assert len(judge.arrivals) == 1, judge.arrivals
    assert took < 3, took


def test_a_request_waiting_for_a_retry_after_still_fails_when_its_step_spends_its_budget(tmp_path: Path) -> None:
    """A request of a step that waits out an outage waited for the endpoint's Retry-After whole (up to
    llm.retry_max_delay, 30 s by default), though the step's budget ran out meanwhile: the refused request stopped
    at the budget, as an outage's waits do, but one started after the 429 was held for the rest of the wish before
    it failed as spent."""
    import asyncio

    from amaris_cli.models import QueriesAnswer

    judge = SimJudge(SimJudgeConfig(fault_plan=["429"] * 100, retry_after=6)).start_in_thread()

    async def step() -> tuple[float, list[Any]]:
        client = direct_client(tmp_path, judge.base_url,
                               "outage_budget = 1\nretry_base_delay = 0.01\nretry_max_delay = 10\n",
                               "max_attempts = 3\ntimeout = 2\n")

        def ask(text: str) -> Any:
            return asyncio.ensure_future(client.ask("scorer", [{"role": "user", "content": text}], QueriesAnswer,
                                                    step=0, reasks=0))

        started = time.monotonic()
        first = ask("a")
        wait_until_sent = time.monotonic() + 5
        while not judge.arrivals and time.monotonic() < wait_until_sent:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the 429 has come back: the step waits out the outage, 1 s in all
        answers = await asyncio.gather(first, ask("b"))
        await client.aclose()
        return time.monotonic() - started, [a.error for a in answers]

    try:
        took, errors = asyncio.run(step())
    finally:
        judge.stop()
    assert all(e is not None and "unreachable for 1s of this step" in e for e in errors), errors
    assert took < 3, took  # the budget, 1 s; 6.5 s before (b waited for the Retry-After)


@pytest.mark.parametrize("queued_at", ["first contact", "concurrency slot", "rate limiter"])
def test_a_request_queued_when_a_retry_after_comes_waits_for_it_too(tmp_path: Path, queued_at: str) -> None:
    """The wait for a Retry-After was checked once per attempt, before the request queued: one waiting for the
    endpoint's first answer (its first contact goes alone), for a concurrency slot or for the rate budget when
    the 429 came was sent the moment the refused request let it go, and refused again. The step's next wave
    waits in those queues, so the wait held back only the requests started after the 429."""
    import asyncio

    from amaris_cli.models import QueriesAnswer

    warm = queued_at != "first contact"  # an endpoint that answered once: its requests no longer go one at a time
    limits = {"first contact": "", "concurrency slot": "concurrency = 1\n",
              "rate limiter": "requests_per_minute = 100\n"}[queued_at]  # a burst of 1, then one every 0.6 s

    async def two(judge: SimJudge) -> None:
        client = direct_client(tmp_path, judge.base_url,
                               "outage_budget = 60\nretry_base_delay = 0.01\nretry_max_delay = 10\n",
                               f"max_attempts = 3\ntimeout = 5\n{limits}")

        def ask(text: str) -> Any:
            return client.ask("scorer", [{"role": "user", "content": text}], QueriesAnswer, step=0, reasks=0)

        if warm:
            await ask("warm")
        await asyncio.gather(ask("a"), ask("b"))
        await client.aclose()

    judge = SimJudge(SimJudgeConfig(fault_plan=[""] * warm + ["429"], retry_after=2.0)).start_in_thread()
    try:
        asyncio.run(two(judge))
    finally:
        judge.stop()
    arrivals = judge.arrivals[warm:]
    assert len(arrivals) == 3, arrivals  # a (429), then b and a again, both after the wait
    assert min(arrivals[1:]) - arrivals[0] >= 2.0, [round(t - arrivals[0], 3) for t in arrivals]


@pytest.mark.timeout(120)
def test_an_outage_of_more_than_a_thousand_retries_is_still_waited_out(tmp_path: Path, raw: list[RawServer]) -> None:
    """The backoff's exponent grew with every retry of an outage: at the 1025th, 2 ** 1024 overflowed a float and
    the command ended in an OverflowError traceback (amaris serve answered 500 'internal error'). A few
    minutes of a refused judge with a short retry_max_delay, or a long outage_budget, reach it."""
    raw.append(RawServer("reset"))
    port = raw[-1].port
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG.replace("outage_budget = 0", "outage_budget = 100")
                      .replace("retry_max_delay = 0.05", "retry_max_delay = 0.001"))
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    judges: list[SimJudge] = []
    ended = threading.Event()

    def back() -> None:  # the judge comes back once 1100 attempts were refused
        wait_until(lambda: raw[-1].accepted >= 1100 or ended.is_set(), timeout=100, what="1100 attempts")
        raw[-1].stop()
        judges.append(SimJudge().start_in_thread(port=port))

    thread = threading.Thread(target=back)
    thread.start()
    try:
        result = score_one(run, tmp_path, f"http://127.0.0.1:{port}/v1")
    finally:
        ended.set()
        thread.join()
        for judge in judges:
            judge.stop()
    assert result.exit_code == 0, result.stderr
    [record] = read_jsonl(run / "steps/000000/scores.jsonl")
    assert record["status"] == "scored", record


def test_a_rejected_response_format_is_named_once_or_falls_back_under_auto(tmp_path: Path, sim_factory) -> None:
    """llama.cpp's server answers a json_schema response_format with HTTP 500: it was retried 5 times per
    rollout and every rollout failed, one by one."""
    judge = sim_factory(rejected_formats=("json_schema",))
    strict = run_with(tmp_path, "strict", extra='\n[agents.scorer]\nresponse_format = "json_schema"\n')
    result = invoke("score", step_file(0), "--run", strict, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 2, result.stderr
    assert "Input should be 'text' or 'json_object'" in result.stderr and "response_format" in result.stderr
    assert judge.stats["requests"] == 1

    auto = run_with(tmp_path, "auto", extra='\n[agents.scorer]\nresponse_format = "auto"\n')
    result = invoke("score", step_file(0), "--run", auto, "--step", "0", env=judge_env(judge, AMARIS_SCORER_CONCURRENCY="1"))
    assert result.exit_code == 0, result.stderr
    assert "does not take response_format 'json_schema'" in result.stderr
    assert all(r["status"] == "scored" for r in read_jsonl(auto / "steps/000000/scores.jsonl"))
    formats = [c["params"].get("response_format", {}).get("type") for c in read_jsonl(auto / "calls.jsonl")
               if c["context"] != "scale check"]
    assert formats == ["json_schema"] + ["json_object"] * 16
    replay = invoke("replay", auto, "--out", tmp_path / "replayed", "--offline")
    assert replay.exit_code == 0, replay.stderr
    assert outputs(tmp_path / "replayed") == outputs(auto)


def test_a_judge_whose_chat_template_drops_system_messages_gets_its_instructions_in_the_user_message(
        tmp_path: Path, sim_factory) -> None:
    """llama.cpp's Gemma chat format drops system messages: the judge never saw the rubric or the instructions, so
    every answer broke the contract (a failed record each, after the re-asks), with no setting to do otherwise.
    `system_role = "user"` opens the first user message with them; the step is then judged as a judge that reads
    system messages judges it."""
    judge = sim_factory(drop_system_messages=True)
    blind = run_with(tmp_path, "blind")
    result = invoke("score", step_file(0), "--run", blind, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 4, result.stderr
    assert all(r["status"] == "failed" for r in read_jsonl(blind / "steps/000000/scores.jsonl"))

    env = judge_env(judge, AMARIS_SYSTEM_ROLE="user")
    reasked = run_with(tmp_path, "reasked")  # a re-ask is sent without a system message too
    result = invoke("score", step_file(0), "--run", reasked, "--step", "0",
                    env=judge_env(sim_factory(drop_system_messages=True, fault_plan=["two_objects"]),
                                  AMARIS_SYSTEM_ROLE="user"))
    assert result.exit_code == 0, result.stderr
    calls = read_jsonl(reasked / "calls.jsonl")
    assert any(len(c["messages"]) == 3 for c in calls if c["messages"]), "the first answer was re-asked"
    assert all(m["role"] != "system" for c in calls if c["messages"] for m in c["messages"])
    run = run_with(tmp_path, "user")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=env)
    assert result.exit_code == 0, result.stderr
    calls = read_jsonl(run / "calls.jsonl")
    assert {c["agent"] for c in calls} >= {"scorer", "analyzer", "summarizer", "updater"}
    assert all(m["role"] != "system" for c in calls if c["messages"] for m in c["messages"])
    reference = run_with(tmp_path, "reference")
    assert invoke("loop", EXAMPLES / "math", "--run", reference, "--steps", "0:0",
                  env=judge_env(sim_factory())).exit_code == 0
    rewards = [(r["rollout_id"], r["reward"]) for r in read_jsonl(run / "steps/000000/scores.jsonl")]
    assert rewards == [(r["rollout_id"], r["reward"]) for r in read_jsonl(reference / "steps/000000/scores.jsonl")]
    replay = invoke("replay", run, "--out", tmp_path / "replayed", "--offline", env=env)
    assert replay.exit_code == 0, replay.stderr
    assert outputs(tmp_path / "replayed") == outputs(run)


def test_an_outage_during_the_update_alone_is_shown_as_a_skipped_step(tmp_path: Path, sim_factory) -> None:
    """The judge answers the step's score, analyses and summary, then not the updater: the rubric was carried
    forward (update.json), but evolve said nothing, provenance recorded no skip and inspect showed the step as
    'updated', although the README says the three of them tell the skip (as for a summarizer that gave no answer)."""
    run = run_with(tmp_path, budget=1)
    assert invoke("score", step_file(0), "--run", run, "--step", "0", "--on-error", "neutral",
                  env=judge_env(sim_factory())).exit_code == 0
    result = invoke("evolve", "--run", run, "--step", "0", env=judge_env(sim_factory(agent_faults={"updater": "503"})))
    assert result.exit_code == 0, result.stderr
    assert "warning: step 0 was not evaluated (summarized, not updated: step 0: the updater failed" in result.stderr
    assert "rubric version 1 carries the one before it forward unchanged" in result.stderr, result.stderr
    update = json.loads((run / "steps/000000/update.json").read_text())
    assert update["carried_forward"]["cause"] == "skipped" and update["applied"] == []
    evolution = json.loads((run / "steps/000000/provenance.json").read_text())["evolution"]
    assert evolution["status"] == "done" and "the updater failed" in evolution["skipped"], evolution
    assert [s["state"] for s in json.loads(invoke("inspect", run, "--json").stdout)["steps"]] == ["skipped"]


def _evolve_in_background(run: Path, step: int, judge: SimJudge):
    """`amaris evolve ... &`, and the moment of training that follows it: until the evolution holds its step
    (a score started before that would find no evolution running)."""
    proc = start(process_env(judge), "evolve", "--run", run, "--step", step, "--quiet")
    wait_until(lambda: holds_step(run, step) or proc.poll() is not None, timeout=60, what=f"evolve {step} to start")
    return proc


def _ended(evolutions: list[tuple[int, subprocess.Popen[str]]]) -> str:
    """The background evolutions that have ended in an error, with their stderr (for an assertion's message)."""
    return "\n".join(f"evolve {t}: exit {p.returncode}: {p.stderr.read() if p.stderr else ''}"
                     for t, p in evolutions if p.poll() not in (None, 0))


@pytest.mark.timeout(600)
def test_the_online_recipe_survives_a_judge_outage_during_a_step(tmp_path: Path) -> None:
    """README's recipe (score --lag 1 --on-error neutral --rewards, evolve &) over 8 steps, the judge down
    during step 3, its score and its evolution: step 3's evolution failed ("no analyzed rollouts") and the
    scores of steps 5 and 6 exited 1, ending training although the judge had been back for two steps."""
    run = run_with(tmp_path, budget=1)
    port = free_port()
    judge = SimJudge(SimJudgeConfig(latency=0.02)).start_in_thread(port=port)
    env = judge_env(judge)
    evolutions: list[tuple[int, subprocess.Popen[str]]] = []
    try:
        for t in range(8):
            if t == 3:  # the evolution of step 2 is done first: the outage is step 3's alone
                failed = _ended(evolutions[:-1])
                assert not failed, failed
                code, err, _ = finish(evolutions[-1][1])  # type: ignore[arg-type]
                assert code == 0, err
                judge.stop()
            rewards = tmp_path / f"rewards-{t}.jsonl"
            result = invoke("score", step_file(t), "--run", run, "--step", t, "--lag", "1", "--on-error", "neutral",
                            "--rewards", rewards, env=env)
            assert result.exit_code == 0, f"step {t}: {result.stderr}\n{_ended(evolutions)}"
            evolutions.append((t, _evolve_in_background(run, t, judge)))
            if t == 3:
                code, err, _ = finish(evolutions[-1][1])  # type: ignore[arg-type]
                assert code == 0, err  # exit 0 with one warning line
                assert "warning: step 3 was not evaluated" in err and "evolved as skipped" in err, err
                judge = SimJudge(SimJudgeConfig(latency=0.02)).start_in_thread(port=port)
        for t, proc in evolutions:
            code, err, _ = finish(proc)  # type: ignore[arg-type]
            assert code == 0, f"evolve {t}: {err}"
    finally:
        judge.stop()
    for t in range(8):
        rows = read_jsonl(tmp_path / f"rewards-{t}.jsonl")
        assert len(rows) == 16
        statuses = {r["status"] for r in rows}
        assert statuses == ({"failed"} if t == 3 else {"scored"}), (t, statuses)
    assert {r["reward"] for r in read_jsonl(tmp_path / "rewards-3.jsonl")} == {0.5}
    update3 = json.loads((run / "steps/000003/update.json").read_text())
    assert update3["carried_forward"]["cause"] == "skipped" and update3["applied"] == []
    assert json.loads((run / "rubrics/step-000004.json").read_text())["adaptive"] == \
        json.loads((run / "rubrics/step-000003.json").read_text())["adaptive"]
    summary3 = json.loads((run / "steps/000003/summary.json").read_text())
    assert summary3["skipped"]["judged"] == 0 and "was not evaluated" in summary3["summary"]["memory_entry"]
    provenance = json.loads((run / "steps/000003/provenance.json").read_text())["evolution"]
    assert provenance["status"] == "done" and "0 of 16 rollouts judged" in provenance["skipped"]
    # The rubric keeps evolving after the outage: every later step is updated by the updater, from its memory.
    later = [json.loads((run / f"steps/{t:06d}/update.json").read_text()) for t in range(4, 8)]
    assert all(u["carried_forward"] is None for u in later)
    updater_steps = {c["step"] for c in read_jsonl(run / "calls.jsonl") if c["agent"] == "updater" and c["response"]}
    assert updater_steps >= {4, 5, 6, 7}
    shown = json.loads(invoke("inspect", run, "--json").stdout)
    assert [s["state"] for s in shown["steps"]] == ["updated"] * 3 + ["skipped"] + ["updated"] * 4
    # The run replays as it ran: the outage's failures come from the record, not from a judge.
    replay = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert replay.exit_code == 0, replay.stderr
    assert outputs(tmp_path / "replayed") == outputs(run)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_served_run_survives_a_judge_outage_during_a_step(tmp_path: Path, mode: str) -> None:
    """Behind `amaris serve`, the next step after an outage answered `409: the evolution of step 2 failed`."""
    run = run_with(tmp_path, budget=1)
    port = free_port()
    judge = SimJudge(SimJudgeConfig(latency=0.02)).start_in_thread(port=port)
    server = start_server(run, serve_env(judge), "--mode", mode, "--on-error", "neutral", "--rollouts-per-step", "16")
    rows = {t: [json.loads(line) for line in step_file(t).read_text().splitlines()] for t in range(6)}
    answers: dict[int, list[dict]] = {}
    try:
        with httpx.Client(base_url=server.url, timeout=300) as client:
            def post_step(t: int) -> None:
                bodies = [{**r, "id": f"{t}-{r['id']}", "metadata": {**r.get("metadata", {}), "current_step": t}}
                          for r in rows[t]]
                results: list[dict] = []
                workers = [threading.Thread(target=lambda b=b: results.append(client.post("/score", json=b).json()))
                           for b in bodies]
                for w in workers:
                    w.start()
                for w in workers:
                    w.join(300)
                answers[t] = results

            for t in range(6):
                if t == 3:
                    wait = client.get("/rubric_status/wait", params={"step": 2, "timeout": 120}).json()
                    assert wait["state"] == "done", wait
                    judge.stop()
                post_step(t)
                if t == 3:
                    wait = client.get("/rubric_status/wait", params={"step": 3, "timeout": 120}).json()
                    assert wait["state"] == "done", wait  # skipped is done: nothing waits on it in vain
                    judge = SimJudge(SimJudgeConfig(latency=0.02)).start_in_thread(port=port)
            wait = client.get("/rubric_status/wait", params={"step": 5, "timeout": 120}).json()
            assert wait["state"] == "done", wait
        assert server.stop(timeout=60) == 0
    finally:
        server.stop()
        judge.stop()
    for t in range(6):
        assert len(answers[t]) == 16, answers[t]
        statuses = {a["status"] for a in answers[t]}
        if t == 3:
            assert statuses == {"failed"} and {a["score"] for a in answers[t]} == {0.5}
        else:
            assert statuses == {"scored"}, (t, answers[t][:2])
    assert json.loads((run / "steps/000003/update.json").read_text())["carried_forward"]["cause"] == "skipped"
    # no conflict said (a port such as 40961 in a URL is none)
    assert "Traceback" not in server.stderr and not re.search(r"(?<![\d:])409(?!\d)", server.stderr), server.stderr
    # The server says so: its evolution's own log, which held the outage, is gone once the evolution is done.
    assert "step 3: evolution done, as skipped: the step was not evaluated (0 of 16 rollouts judged" in server.stderr
    assert "rubric version 4 carries the one before it forward unchanged" in server.stderr, server.stderr


@pytest.mark.timeout(180)
def test_a_served_judgement_waiting_for_the_judge_ends_at_a_stop_as_503_not_judged(tmp_path: Path) -> None:
    """SIGTERM while /score requests wait out an outage: uvicorn's 30 s grace ran out, it cancelled them (a
    traceback each, and 'Internal Server Error' in plain text to the trainer), and the server then waited for the
    rest of the budget before it exited. They now end at the stop: 503 'not judged', nothing journaled for them,
    and the same rollouts are judged after a restart."""
    run = run_with(tmp_path, budget=60)
    port = free_port()
    rows = [json.loads(line) for line in step_file(0).read_text().splitlines()][:4]
    bodies = [{"rollout": {"id": r["id"], "input": r["input"], "output": r["output"]}, "metadata": {"current_step": 0}}
              for r in rows]
    env = clean_env(OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY=PLANTED_KEY)  # nothing there yet
    server = start_server(run, env, "--on-error", "neutral")
    answers: list[httpx.Response] = []
    with httpx.Client(base_url=server.url, timeout=120) as client:
        posts = [threading.Thread(target=lambda b=b: answers.append(client.post("/score", json=b))) for b in bodies]
        for post in posts:
            post.start()
        server.wait_for_line("waiting for the scorer endpoint")
        started = time.monotonic()
        code = server.stop(timeout=25)
        for post in posts:
            post.join(60)
    assert code == 0 and time.monotonic() - started < 25, server.stderr
    assert [a.status_code for a in answers] == [503] * 4, [a.text for a in answers]
    assert all(a.json()["error"].startswith("not judged: stopping while the scorer endpoint") for a in answers)
    assert "Traceback" not in server.stderr, server.stderr
    judge = SimJudge().start_in_thread(port=port)
    try:
        server = start_server(run, env, "--on-error", "neutral")
        with httpx.Client(base_url=server.url, timeout=120) as client:
            again = [client.post("/score", json=b).json() for b in bodies]
        assert server.stop(timeout=60) == 0, server.stderr
    finally:
        server.stop()
        judge.stop()
    assert [a["status"] for a in again] == ["scored"] * 4, again


@pytest.mark.timeout(180)
def test_a_rescore_the_judge_could_not_make_is_told_by_evolve_and_by_the_sync_server(tmp_path: Path,
                                                                                     sim_factory) -> None:
    """The judge answers the step's score, analyses and update, then not the rescore: every --rescored reward (what
    a sync server answers the trainer) is the failure policy's, but evolve said 'mean reward -' and exit 0, and
    the server 'evolution done; rubric version 1 written', and inspect nothing: no one told it."""
    no_gate = "\n[gate]\nenabled = false\n"  # the gate's probes would meet the outage first, and carry forward
    run = run_with(tmp_path, budget=1, extra=no_gate)
    assert invoke("score", step_file(0), "--run", run, "--step", "0", "--lag", "0", "--on-error", "neutral",
                  env=judge_env(sim_factory())).exit_code == 0
    result = invoke("evolve", "--run", run, "--step", "0", "--rescore",
                    env=judge_env(sim_factory(agent_faults={"scorer": "503"})))
    assert result.exit_code == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "rescored step 0 with rubric v1: mean reward -; 16 of 16 could not be judged" in said, said

    served_run = run_with(tmp_path, "served", budget=1, extra=no_gate)
    judge = SimJudge(SimJudgeConfig(latency=0.05)).start_in_thread()
    server = start_server(served_run, serve_env(judge), "--mode", "sync", "--on-error", "neutral",
                          "--rollouts-per-step", "16")
    try:
        def rescore_meets_an_outage() -> None:  # from the updater's request on, the scorer's requests are refused
            wait_until(lambda: judge.stats["agent:updater"] >= 1, timeout=120, what="the updater's request")
            judge.config.agent_faults["scorer"] = "503"

        watcher = threading.Thread(target=rescore_meets_an_outage)
        watcher.start()
        rows = [json.loads(line) for line in step_file(0).read_text().splitlines()]
        with httpx.Client(base_url=server.url, timeout=300) as client:
            answers: list[dict] = []
            posts = [threading.Thread(target=lambda r=r: answers.append(client.post("/score", json={
                **r, "metadata": {"current_step": 0}}).json())) for r in rows]
            for post in posts:
                post.start()
            for post in posts:
                post.join(300)
        watcher.join()
        assert server.stop(timeout=60) == 0, server.stderr
    finally:
        server.stop()
        judge.stop()
    assert {(a["status"], a["score"], a["rescored"]) for a in answers} == {("failed", 0.5, True)}, answers[:1]
    assert "step 0: evolution done; rubric version 1 written; 16 of 16 re-scored rollouts could not be judged" \
        in server.stderr, server.stderr


@dataclass
class SpentStep:
    client: httpx.Client
    bodies: list[dict]  # the step's rollouts as /score bodies; the first has spent the budget
    judge_back: Callable[..., SimJudge]  # a sim-judge (of this config) starts on the closed port


@contextmanager
def step_with_its_budget_spent(tmp_path: Path, rollouts: int) -> Iterator[SpentStep]:
    """amaris serve with a 1 s outage budget and its judge on a closed port: the step's first rollout waits the
    whole budget and fails; the server must stop cleanly afterwards."""
    run = run_with(tmp_path, budget=1)
    port = free_port()
    env = clean_env(OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY=PLANTED_KEY)
    rows = [json.loads(line) for line in step_file(0).read_text().splitlines()][:rollouts]
    bodies = [{"rollout": {"id": r["id"], "input": r["input"], "output": r["output"]}, "metadata": {"current_step": 0}}
              for r in rows]
    server = start_server(run, env, "--on-error", "neutral")
    judges: list[SimJudge] = []

    def judge_back(config: SimJudgeConfig | None = None) -> SimJudge:
        judges.append(SimJudge(config or SimJudgeConfig()).start_in_thread(port=port))
        return judges[-1]

    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            first = client.post("/score", json=bodies[0]).json()
            assert first["status"] == "failed" and "unreachable for 1s of this step" in first["error"], first
            yield SpentStep(client, bodies, judge_back)
        assert server.stop(timeout=60) == 0, server.stderr
    finally:
        server.stop()
        for judge in judges:
            judge.stop()


@pytest.mark.timeout(120)
def test_a_served_step_whose_budget_is_spent_judges_its_rollouts_once_the_judge_is_back(tmp_path: Path) -> None:
    """Once a step had waited its whole budget, its requests were no longer sent: a rollout of the same step that
    came after the judge was back (or a client's retry of a failed one) failed unsent, as nothing looked whether
    the endpoint answered again. One new request at a time is still sent (after a failed one, not for
    OUTAGE_MAX_DELAY_S: against a judge that never answers each costs a whole timeout)."""
    with step_with_its_budget_spent(tmp_path, 2) as step:
        step.judge_back()
        time.sleep(OUTAGE_MAX_DELAY_S)  # a failed look is followed by the next one after this long
        later = step.client.post("/score", json=step.bodies[1]).json()
        again = step.client.post("/score", json=step.bodies[0]).json()  # the trainer's retry of the failed one
    assert later["status"] == "scored", later["error"]
    assert again["status"] == "scored", again


def test_a_run_built_by_session_commands_then_loop_replays_exactly(tmp_path: Path, sim) -> None:
    """README's "A session" commands on a run, then `loop --update-every 2` on the same run: the loop recorded
    step 0 as not updated although rubric v1 from that update scored step 1, and `replay --offline` exited 5."""
    run = run_with(tmp_path)
    env = judge_env(sim)
    for args in (("score", step_file(0), "--run", run, "--step", "0"), ("analyze", "--run", run, "--step", "0"),
                 ("summarize", "--run", run, "--step", "0"), ("update", "--run", run, "--step", "0")):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.stderr
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:3", "--update-every", "2", env=env)
    assert result.exit_code == 0, result.stderr
    states = [s["state"] for s in json.loads(invoke("inspect", run, "--json").stdout)["steps"]]
    assert states == ["updated", "updated", "evolved", "updated"], states  # step 0 keeps its update
    replay = invoke("replay", run, "--out", tmp_path / "replayed", "--offline")
    assert replay.exit_code == 0, replay.stderr
    assert outputs(tmp_path / "replayed") == outputs(run)


def test_under_fail_a_later_step_names_the_root_cause_and_the_command_that_resumes(tmp_path: Path, sim) -> None:
    run = run_with(tmp_path)
    env = judge_env(sim)
    for t in (0, 1):
        assert invoke("score", step_file(t), "--run", run, "--step", t, "--lag", "1", env=env).exit_code == 0
    assert invoke("evolve", "--run", run, "--step", "0", env=env).exit_code == 0
    down = {"OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1", "OPENAI_API_KEY": PLANTED_KEY}
    failed = invoke("score", step_file(2), "--run", run, "--step", "2", "--lag", "1", env=down)
    assert failed.exit_code == 4 and "connection refused" in failed.stderr, failed.stderr  # the command that met it
    assert invoke("evolve", "--run", run, "--step", "1", env=env).exit_code == 0
    evolved = invoke("evolve", "--run", run, "--step", "2", env=env)
    assert evolved.exit_code == 4, evolved.stderr
    later = invoke("score", step_file(4), "--run", run, "--step", "4", "--lag", "1", env=env)
    assert later.exit_code == 1, later.stderr
    assert "the evolution of step 2 failed" in later.stderr and "connection refused" in later.stderr, later.stderr
    assert f"amaris score ROLLOUTS.jsonl --run {run} --step 2" in later.stderr, later.stderr


def test_a_step_whose_budget_is_spent_waits_for_no_rate_limit(tmp_path: Path) -> None:
    """Once a step spent its outage budget its requests fail unsent, but each still waited its turn at the rate
    limiter first (a reviewer's finding: 29 requests, 35 s at requests_per_minute = 60, a 256-rollout step held
    for minutes), and took from the budget the judge's other requests need once it is back. Requests already
    waiting at the limiter when the budget runs out stop waiting too (a step's requests all start at once)."""
    import asyncio

    from amaris_cli.models import QueriesAnswer

    url = f"http://127.0.0.1:{free_port()}/v1"

    async def step(together: bool) -> tuple[float, list]:
        client = direct_client(tmp_path, url, "outage_budget = 1\nretry_base_delay = 0.01\nretry_max_delay = 0.05\n",
                               "max_attempts = 3\ntimeout = 1\nrequests_per_minute = 60\n")
        ask = [client.ask("scorer", [{"role": "user", "content": f"q{i}"}], QueriesAnswer, step=0, reasks=0)
               for i in range(30)]
        if together:  # all queue at the limiter while the first spends the budget
            answers = await asyncio.gather(*ask)
        else:  # the first spends the budget, then the others are asked
            answers = [await ask[0], *await asyncio.gather(*ask[1:])]
        await client.aclose()
        return client.usage["scorer"].rate_limited_s, answers

    for together in (False, True):
        waited, answers = asyncio.run(step(together))
        assert all(a.error is not None and "unreachable" in a.error for a in answers), together
        assert waited < 5, (together, waited)  # 29 requests at one a second: 28-35 s before


def test_a_look_the_judge_answers_by_refusing_its_request_ends_the_outage(tmp_path: Path) -> None:
    """The look that a step whose budget is spent still sends (one at a time) is answered by the judge, but with
    a refusal of that request (HTTP 400: its context is too long). The endpoint is up: the next rollout is sent
    at once, not failed unsent until a later look happens to be accepted (a reviewer's finding)."""
    with step_with_its_budget_spent(tmp_path, 3) as step:
        judge = step.judge_back(SimJudgeConfig(agent_faults={"scorer": "400"}))
        time.sleep(OUTAGE_MAX_DELAY_S)  # a failed look is followed by the next one after this long
        refused = step.client.post("/score", json=step.bodies[1]).json()
        del judge.config.agent_faults["scorer"]
        later = step.client.post("/score", json=step.bodies[2]).json()  # at once: no look is due for 5 s
    assert refused["status"] == "failed" and "HTTP 400" in refused["error"], refused
    assert later["status"] == "scored", later["error"]


def test_a_judge_that_never_answered_is_not_asked_by_every_request_in_turn_without_an_outage_budget(
        tmp_path: Path, raw: list[RawServer]) -> None:
    """With llm.outage_budget = 0 (no outage is waited for) and a judge that accepts connections but has never
    answered, the requests went one at a time (an endpoint is asked alone until it answered once), each making
    every attempt of one timeout: 8 rollouts x 3 attempts x 1 s, and 256 x 5 x 120 s (43 hours) at the
    defaults. Once one request gave up without any answer, the others fail unsent, bar a look every
    OUTAGE_MAX_DELAY_S."""
    raw.append(RawServer("silent"))
    run = run_with(tmp_path, budget=0)
    rows = [json.loads(line) for line in step_file(0).read_text().splitlines()][:8]
    result = score_one(run, tmp_path, f"http://127.0.0.1:{raw[-1].port}/v1", "--on-error", "neutral",
                       rollouts=write_jsonl(tmp_path / "eight.jsonl", rows))
    assert result.exit_code == 0, result.stderr
    records = read_jsonl(run / "steps/000000/scores.jsonl")
    assert len(records) == 8 and {r["status"] for r in records} == {"failed"} and {r["reward"] for r in records} == {0.5}
    unsent = [r for r in records if "has not answered any request yet" in r["error"]]
    assert unsent and all("timed out after 1s" in r["error"] for r in unsent), [r["error"] for r in records]
    sent = json.loads(result.stdout)["usage"]["scorer"]["requests"]
    attempts = int(TEST_CONFIG.split("max_attempts = ")[1].split()[0]) if "max_attempts = " in TEST_CONFIG else 3
    assert sent <= attempts + 2, sent  # one request's attempts, then at most a look or two


class EmbeddingsServer:
    """An OpenAI-compatible /v1/embeddings on 127.0.0.1 (the sim-judge's hashed vectors) that answers 503 with a
    1 ms `retry-after-ms` (so the SDK's own retries are spent at once) while `down`, as a provider's blip does, and
    to the texts that hold `down_for` (an update's entry, say) whenever they come."""

    def __init__(self) -> None:
        import http.server

        from amaris_cli.simjudge.server import hashed_embedding

        outer = self
        self.down = False
        self.down_for: str | None = None
        self.refused = self.answered = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the standard library's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if outer.down or (outer.down_for is not None and any(outer.down_for in t for t in texts)):
                    outer.refused += 1
                    payload, status = {"error": {"message": "upstream unavailable", "type": "server_error"}}, 503
                else:
                    outer.answered += 1
                    payload, status = {"object": "list", "model": body["model"], "data": [
                        {"object": "embedding", "index": i, "embedding": hashed_embedding(t)}
                        for i, t in enumerate(texts)]}, 200
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("retry-after-ms", "1")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.timeout(120)
def test_an_embeddings_endpoint_down_for_a_moment_during_an_update_is_waited_out(tmp_path: Path, sim) -> None:
    """memory.embedding = "openai": the embeddings endpoint answered 503 for 2 s while the update of step 1 embedded
    its queries. The judge's requests wait out such an outage (llm.outage_budget), but the embedder gave up after
    the SDK's own retries: the evolution failed (exit 1) and `score --lag 1` of step 3 exited 1 on its failed mark,
    ending the training run for a blip well inside the budget."""
    embeddings = EmbeddingsServer()
    try:
        memory = FAST_MEMORY + f'embedding_base_url = "{embeddings.url}"\n'
        run = run_with(tmp_path, budget=30, extra=memory)
        env = judge_env(sim)
        for t in range(2):
            assert invoke("score", step_file(t), "--run", run, "--step", t, "--lag", "1", "--on-error", "neutral",
                          env=env).exit_code == 0
            if t == 1:  # the update of step 1 embeds its queries to search step 0's entries
                embeddings.down = True
                threading.Timer(2.0, lambda: setattr(embeddings, "down", False)).start()
            result = invoke("evolve", "--run", run, "--step", t, env=env)
            assert result.exit_code == 0, result.stderr
        assert embeddings.refused > 0 and not embeddings.down
        assert "waiting for the embeddings endpoint" in result.stderr, result.stderr
        update = json.loads((run / "steps/000001/update.json").read_text())
        assert update["carried_forward"] is None and update["to_version"] == 2
        for t in (2, 3):  # step 3 is scored with rubric version 2, which the evolution of step 1 wrote
            result = invoke("score", step_file(t), "--run", run, "--step", t, "--lag", "1", "--on-error", "neutral",
                            env=env)
            assert result.exit_code == 0, result.stderr
    finally:
        embeddings.stop()


@pytest.mark.parametrize("command", ["evolve", "loop", "loop-scoring"])
def test_sigterm_while_the_embeddings_endpoint_is_waited_for_ends_the_command_at_once(tmp_path: Path, sim,
                                                                                       sim_factory, command: str) -> None:
    """The embedder waits out an endpoint that is down in a worker thread (`evolve`'s update embeds its queries
    there; `loop` indexes a step in the background), where the cancellation of SIGTERM never reached it: the command
    went on waiting for up to the outage budget (here 120 s) and a scheduler's SIGKILL would cut its cleanup. It ends
    as SIGTERM ends a command anywhere else. `loop-scoring`: the signal comes while the loop scores the next step
    (a judge answering in 1 s), not while it waits for the indexing: the loop then waited for the indexing to end."""
    import signal
    import sys

    from tests.conftest import stop_signals

    embeddings = EmbeddingsServer()
    proc = None
    try:
        run = run_with(tmp_path, budget=120, extra=FAST_MEMORY + f'embedding_base_url = "{embeddings.url}"\n')
        env = process_env(sim)
        if command == "evolve":  # step 0 evolved; the update of step 1 embeds its queries while the endpoint is down
            for t in range(2):
                assert invoke("score", step_file(t), "--run", run, "--step", t, "--lag", "1",
                              env=judge_env(sim)).exit_code == 0
            assert invoke("evolve", "--run", run, "--step", 0, env=judge_env(sim)).exit_code == 0
            args: list[object] = ["evolve", "--run", run, "--step", 1]
        else:  # the loop indexes step 0 in a worker thread while it goes on
            args = ["loop", EXAMPLES / "math", "--run", run, "--steps", "0:2"]
        if command == "loop-scoring":  # step 0's update, indexed in the background while step 1 is scored
            env, embeddings.down_for = process_env(sim_factory(latency=1.0)), "rubric update ("
        else:
            embeddings.down = True
        proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", *map(str, args)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=stop_signals())
        # past the SDK's own 5 tries: the embedder's outage wait (loop-scoring: as soon as the indexing has begun,
        # while step 1 is still being scored; the outage wait's first pauses would take the loop past its analysis)
        refusals = 1 if command == "loop-scoring" else 7
        wait_until(lambda: embeddings.refused >= refusals or proc.poll() is not None, timeout=90,
                   what="the outage wait")
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        if command == "loop-scoring":  # step 1 not yet analyzed: the loop was not waiting for the memory
            assert not (run / "steps/000001/analyses.jsonl").exists()
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - stopped < 15 and proc.returncode == 143, (proc.returncode, err)
        assert "terminated: re-run the same command" in " ".join(err.split()), err
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        embeddings.stop()


def _seconds_from_cancel(embedder: object, waiting: Callable[[], bool]) -> float:
    """Embed a text in a worker thread (eventloop.blocking, as `loop` indexes a step), cancel its task once
    `waiting()` (within 20 s), and return the seconds from the cancellation to the end of the worker thread."""
    import asyncio

    from amaris_cli import eventloop

    async def cancelled_while_waiting() -> float:
        task = asyncio.create_task(eventloop.blocking(lambda _stop: embedder.embed(["a text"])))  # type: ignore[attr-defined]
        for _ in range(400):
            if waiting():
                break
            await asyncio.sleep(0.05)
        assert waiting() and not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic()

    cancelled = eventloop.run(cancelled_while_waiting())  # returns once the worker thread has ended too
    return time.monotonic() - cancelled


def test_an_embedder_waiting_in_a_worker_thread_stops_when_its_task_is_cancelled() -> None:
    """`loop` indexes a step in a worker thread (eventloop.blocking). An embedder waiting there for an endpoint that
    is down now ends soon after that task is cancelled (Ctrl-C, SIGTERM); it held the process's exit, which waits
    for its worker threads, for up to the outage budget (here 30 s)."""

    from amaris_cli.config import MemorySettings
    from amaris_cli.memory.embeddings import OpenAIEmbedder

    embeddings = EmbeddingsServer()
    embeddings.down = True
    try:
        embedder = OpenAIEmbedder(MemorySettings(embedding="openai", embedding_base_url=embeddings.url),
                                  {"OPENAI_API_KEY": PLANTED_KEY}, outage_budget=30)

        # past the embedder's first 5 tries: its outage wait
        assert _seconds_from_cancel(embedder, lambda: embeddings.refused >= 7) < 5
    finally:
        embeddings.stop()


def test_an_embeddings_endpoint_that_never_answers_fails_within_its_timeout(raw) -> None:
    """An embeddings endpoint that accepts connections and never answers held an evolution (and a `score --lag 1`
    waiting for it) for the SDK's default 600 s per try, 5 tries: `memory.embedding_timeout` bounds each try."""
    from amaris_cli.config import MemorySettings
    from amaris_cli.errors import AmarisError
    from amaris_cli.memory.embeddings import OpenAIEmbedder

    silent = RawServer("silent")
    raw.append(silent)
    embedder = OpenAIEmbedder(MemorySettings(embedding="openai", embedding_base_url=f"http://127.0.0.1:{silent.port}/v1",
                                             embedding_timeout=0.3), {"OPENAI_API_KEY": PLANTED_KEY})
    failed: list[BaseException] = []

    def embed() -> None:
        try:
            embedder.embed(["a text"])
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failed.append(exc)

    worker = threading.Thread(target=embed, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the embedder still waits for an endpoint that never answers"
    assert len(failed) == 1 and isinstance(failed[0], AmarisError), failed
    assert "did not answer within memory.embedding_timeout (0.3 s) in 5 tries" in str(failed[0])
    assert silent.accepted == 5  # the SDK's tries, each cut at the timeout


def test_an_embedder_whose_endpoint_never_answers_stops_within_one_timeout_of_a_cancellation(raw) -> None:
    """The SDK's own 4 retries ran inside one call, where no stop reaches: against an endpoint that accepts and never
    answers, a Ctrl-C or SIGTERM of a command indexing a step waited up to 5 x memory.embedding_timeout (150 s by
    default, past a scheduler's grace before SIGKILL). The embedder tries again itself, and stops between tries."""

    from amaris_cli.config import MemorySettings
    from amaris_cli.memory.embeddings import OpenAIEmbedder

    silent = RawServer("silent")
    raw.append(silent)
    embedder = OpenAIEmbedder(MemorySettings(embedding="openai", embedding_base_url=f"http://127.0.0.1:{silent.port}/v1",
                                             embedding_timeout=2.0), {"OPENAI_API_KEY": PLANTED_KEY}, outage_budget=60)

    seconds = _seconds_from_cancel(embedder, lambda: silent.accepted >= 1)
    assert seconds < 4.5, f"the embedder went on with its tries for {seconds:.1f} s after the stop"
    assert silent.accepted <= 2


def test_an_embedder_waiting_on_the_loops_thread_goes_on_when_another_task_is_being_cancelled() -> None:
    """On the event loop's thread the embedder's outage wait ends when the command is stopping, which it told from any
    task's pending cancellation: a `wait_for` that timed out (the judge client's request, its outage pause) or a
    worker `bounded_map` stops leaves one until that task runs again, and the embedder then raised KeyboardInterrupt
    for a blip well inside the budget: the command said "interrupted" and exited 130 without any Ctrl-C."""
    import asyncio

    from amaris_cli import eventloop
    from amaris_cli.config import MemorySettings
    from amaris_cli.memory.embeddings import OpenAIEmbedder

    embeddings = EmbeddingsServer()
    embeddings.down = True
    try:
        embedder = OpenAIEmbedder(MemorySettings(embedding="openai", embedding_base_url=embeddings.url),
                                  {"OPENAI_API_KEY": PLANTED_KEY}, outage_budget=30)

        async def while_a_timeout_cancels_another_task() -> list[list[float]]:
            other = asyncio.create_task(asyncio.sleep(60))
            await asyncio.sleep(0)
            other.cancel()  # as wait_for's timeout does: pending until `other` runs, which it cannot while we block
            threading.Timer(1.5, lambda: setattr(embeddings, "down", False)).start()
            return embedder.embed(["a text"])

        try:
            vectors = eventloop.run(while_a_timeout_cancels_another_task())
        except KeyboardInterrupt:  # not let out: it would end the whole session
            pytest.fail("the embedder's wait read another task's cancellation as Ctrl-C")
        assert len(vectors) == 1 and embeddings.refused > 0 and embeddings.answered == 1
    finally:
        embeddings.stop()
