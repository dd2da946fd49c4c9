"""The lean transport (llm/wire.py) and the cheap call-log line (llm/calllog.py): what they send and write
is what the SDK's typed path and the CallRecord model would, on both of the SDK's HTTP transports.

Everything goes over HTTP to the sim-judge through the real openai SDK."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from amaris_cli.agents.common import AgentKit
from amaris_cli.agents.scorer import ScorerAnswer, scorer_messages
from amaris_cli.config import load_settings
from amaris_cli.jsonio import dumps_line
from amaris_cli.llm.calllog import CallRecord, Usage, call_line
from amaris_cli.llm.client import LLMClient
from amaris_cli.llm.endpoint import EndpointFatal
from amaris_cli.models import Criterion, Rollout, RubricSet
from tests.conftest import (
    EXAMPLES,
    PLANTED_KEY,
    TEST_CONFIG,
    invoke,
    judge_env,
    new_run,
    read_jsonl,
    write_jsonl,
)

RUBRIC = RubricSet(version=0, anchors=[Criterion(id="correct", text="The final answer is correct.", weight=2)],
                   adaptive=[Criterion(id="work", text="The response shows its work.", weight=1)])
ROLLOUT = Rollout(id="r1", input="What is 6*7? é ✓", output="6*7 = 42.\nFinal answer: 42", supplemental_context="42")


@pytest.mark.parametrize("fields", [
    {"step": 3, "messages": [{"role": "system", "content": "é ✓ \u2028 \"quoted\""}, {"role": "user", "content": "x"}],
     "response": '{"verdicts": []}', "usage": Usage(prompt_tokens=12, completion_tokens=7), "finish_reason": "stop",
     "error": None, "source": "model"},
    {"step": None, "messages": None, "response": None, "usage": Usage(), "finish_reason": None,
     "error": "gave up after 4 attempts: HTTP 500", "source": "cache"},
    {"step": 0, "messages": [{"role": "user", "content": ""}], "response": "", "usage": Usage(completion_tokens=1),
     "finish_reason": "length", "error": None, "source": "replay"},
])
def test_a_call_line_is_byte_for_byte_the_call_record_dump(fields: dict[str, Any]) -> None:
    common = {"ts": "2026-11-23T03:00:00+00:00", "agent": "scorer", "context": "r-1", "request_hash": "sha256-v1:ab",
              "model": "m", "base_url": "http://127.0.0.1:9/v1",
              "params": {"temperature": 0.0, "max_tokens": 136, "response_format": {"type": "json_object"},
                         "extra_body": {"top_k": 3}},
              "latency_s": 0.0123, "attempts": 2}
    record = CallRecord(**common, **fields)
    assert call_line(**common, **fields) == dumps_line(record.model_dump(mode="json"))


def _settings(url: str) -> Any:
    return load_settings(environ={}, flags={"agents": {"default": {
        "base_url": url, "model": "judge-model", "api_key_env": "AMARIS_TEST_KEY", "service_tier": "flex",
        "extra_body": {"top_k": 3, "metadata": {"run": "t"}}}}})


def _ask(url: str, raw_bodies: bool | None = None) -> Any:
    settings = _settings(url)
    client = LLMClient(settings, environ={"AMARIS_TEST_KEY": PLANTED_KEY})
    kit = AgentKit(settings=settings, client=client)
    messages = scorer_messages(kit, RUBRIC, ROLLOUT, 0)

    async def main() -> Any:
        if raw_bodies is not None:  # the path of openai < 2.16, whose `post` has no `content=`
            client._client(settings.agent("scorer")).raw_bodies = raw_bodies
        try:
            return await client.ask("scorer", messages, ScorerAnswer, step=0, context="r1"), messages
        finally:
            await client.aclose()

    return asyncio.run(main())


def test_the_endpoint_receives_what_the_sdks_typed_call_would_send(sim) -> None:
    """A prepared body through `client.post` equals the body of `chat.completions.create` with the same
    parameters, extra_body merged on top (also through `body=`, the path of older SDKs)."""
    from openai import AsyncOpenAI

    answer, messages = _ask(sim.base_url)
    assert answer.value is not None and answer.error is None
    _ask(sim.base_url, raw_bodies=False)
    agent = _settings(sim.base_url).agent("scorer")

    async def typed() -> None:
        client = AsyncOpenAI(base_url=sim.base_url, api_key="k", max_retries=0)
        await client.chat.completions.create(
            model=agent.model, messages=messages, temperature=agent.temperature,
            max_tokens=sim.requests[0]["max_tokens"], response_format={"type": "json_object"},
            service_tier="flex", extra_body=agent.extra_body)
        await client.close()

    asyncio.run(typed())
    ours, older, sdk = sim.requests
    assert ours == sdk and older == sdk
    assert ours["top_k"] == 3 and ours["service_tier"] == "flex" and ours["messages"] == messages


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_faults_are_named_the_same_on_both_of_the_sdks_transports(tmp_path: Path, sim_factory, transport: str) -> None:
    """The SDK's aiohttp transport reports a dropped connection as a connect timeout; amaris still
    counts it as a dropped connection, and a request that hangs as a timeout."""
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    sim = sim_factory(fault_plan=["429", "500", "hang", "503", "reset", "malformed"], hang_seconds=30)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    rollouts = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "input": "What is 6*7?", "output": "42", "answer": "42"}])
    # 3 s: the hang's attempt waits it out; with 1 s, a loaded machine once timed out an attempt before it reached
    # the judge (one timeout more, and the plan's last fault on the last attempt)
    env = judge_env(sim, AMARIS_TIMEOUT="3", AMARIS_MAX_ATTEMPTS="7", AMARIS_HTTP_CLIENT=transport)
    result = invoke("score", rollouts, "--run", run, "--step", "0", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    faults = json.loads(result.stdout)["usage"]["scorer"]["faults"]
    assert faults == {"rate_limit": 1, "http_500": 1, "timeout": 1, "http_503": 1, "reset": 1, "malformed_body": 1}


def test_a_whole_step_scores_identically_on_both_transports(tmp_path: Path, sim) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    outputs = {}
    for transport in ("aiohttp", "httpx"):
        run = tmp_path / transport
        assert invoke("init", run, "--config", config).exit_code == 0
        result = invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0",
                        env=judge_env(sim, AMARIS_HTTP_CLIENT=transport))
        assert result.exit_code == 0, result.stderr
        outputs[transport] = (run / "steps/000000/scores.jsonl").read_bytes()
    assert outputs["aiohttp"] == outputs["httpx"]


def _log_row(ts: str, **over: Any) -> bytes:
    row = {"ts": ts, "agent": "scorer", "step": 0, "context": "", "request_hash": "h", "model": "judge-model",
           "base_url": "http://127.0.0.1:9/v1", "messages": [], "params": {}, "response": "{}",
           "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "finish_reason": "stop", "latency_s": 0.1,
           "attempts": 1, "error": None, "source": "model"}
    return dumps_line({**row, **over})


def test_only_a_recent_answer_of_the_same_endpoint_and_model_confirms_it(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from amaris_cli.llm.calllog import answered_recently

    log = tmp_path / "calls.jsonl"
    now = datetime.now(UTC)
    old = (now - timedelta(hours=2)).isoformat(timespec="seconds")
    recent = (now - timedelta(minutes=5)).isoformat(timespec="seconds")
    log.write_bytes(_log_row(old, response=None, error="HTTP 500") + _log_row(old) + _log_row(recent, model="other")
                    + _log_row(recent, model="other", response=None, error="HTTP 401") + _log_row(recent, source="cache")
                    + b'{"torn')
    url = "http://127.0.0.1:9/v1"
    assert not answered_recently(log, url, "judge-model", 3600), "old, another model, a failure before, a cache hit"
    assert answered_recently(log, url, "judge-model", 3 * 3600), "the old answer, in a longer window"
    log.write_bytes(log.read_bytes() + b"\n" + _log_row(recent))
    assert answered_recently(log, url, "judge-model", 3600)
    assert not answered_recently(log, "http://127.0.0.1:10/v1", "judge-model", 3600)
    assert not answered_recently(tmp_path / "missing.jsonl", url, "judge-model", 3600)


def test_the_next_command_of_a_run_does_not_send_its_first_request_alone(tmp_path: Path, sim_factory) -> None:
    """The first command of a run sends one request and waits for its answer before the others (so a
    rejected key costs one request); the next command, whose endpoint answered the run a moment ago,
    sends them together."""
    sim = sim_factory(latency=2.0)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    gaps = []
    for step in (0, 1):
        sim.arrivals.clear()
        result = invoke("score", EXAMPLES / "math" / f"step-00{step}.jsonl", "--run", run, "--step", str(step),
                        "--rubric-version", "0", env=judge_env(sim, AMARIS_SCORER_CONCURRENCY="16"))
        assert result.exit_code == 0, result.stderr
        first, second = sorted(sim.arrivals)[:2]
        gaps.append(second - first)
    assert gaps[0] >= 1.9, "the first command's second request waits for the first answer"
    assert gaps[1] < 1.0, "the next command's requests go together"


# --- red team -----------------------------------------------------------------------------------------------
# The client's send path (llm/wire.py, llm/client.py, the endpoint confirmation in llm/calllog.py): a judge
# (or a proxy before it) that answers with broken HTTP, and a key rejected after the endpoint had answered
# the run.
#
# A raw HTTP server on 127.0.0.1 plays the judge, reached through the real CLI and openai SDK on both of the
# SDK's transports.


ROLLOUTS = [{"id": "a", "input": "What is 6*7?", "output": "6*7 = 42.\nFinal answer: 42", "answer": "42"}]
VERDICTS = json.dumps({"verdicts": [{"criterion_id": "correct-answer", "score": 1, "reason": "right"},
                                    {"criterion_id": "shows-reasoning", "score": 0.5, "reason": "brief"}]})
COMPLETION = json.dumps({
    "id": "c", "object": "chat.completion", "created": 0, "model": "judge-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": VERDICTS}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 10}}).encode()


def _answer(extra_headers: bytes = b"", status: bytes = b"HTTP/1.1 200 OK") -> bytes:
    return (status + b"\r\nContent-Type: application/json\r\n" + extra_headers
            + b"Content-Length: " + str(len(COMPLETION)).encode() + b"\r\n\r\n" + COMPLETION)


# What a broken judge or proxy sends instead of its first answer (the connection is then closed).
BROKEN = {
    "bad_status_line": b"GARBAGE NOT HTTP\r\n\r\n",
    "bad_chunk_size": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
    "nul_in_header": _answer(b"X-Trace: a\x00b\r\n"),
    "duplicate_content_length": _answer(b"Content-Length: 5\r\n"),
    "header_line_over_256k": _answer(b"X-Big: " + b"a" * 300_000 + b"\r\n"),  # over both parsers' limits
}


class RawJudge:
    """Answers each request with `first` for the first request, then with a good completion."""

    def __init__(self, first: bytes, rest: bytes | None = None) -> None:
        self.first = first
        self.rest = _answer() if rest is None else rest
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.requests = 0
        self.lock = threading.Lock()
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        buf = b""
        try:
            for _ in range(100):  # bounded: requests on one kept-alive connection
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    rest += chunk
                buf = rest[length:]
                with self.lock:
                    self.requests += 1
                    first = self.requests == 1
                conn.sendall(self.first if first else self.rest)
                if first:
                    return
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self) -> None:
        self.stopped = True
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def raw_judge() -> Iterator[Callable[..., RawJudge]]:
    started: list[RawJudge] = []

    def make(first: bytes, rest: bytes | None = None) -> RawJudge:
        started.append(RawJudge(first, rest))
        return started[-1]

    yield make
    for judge in started:
        judge.stop()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_http_answer_is_a_dropped_connection_on_both_transports(
        tmp_path: Path, raw_judge: Callable[..., RawJudge], kind: str, transport: str) -> None:
    """httpx reports an answer it cannot parse as a connection error; the SDK's aiohttp transport leaves
    aiohttp's own ClientResponseError unmapped, which escaped the client as a traceback."""
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    judge = raw_judge(BROKEN[kind])
    run = new_run(tmp_path)
    env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": PLANTED_KEY, "AMARIS_HTTP_CLIENT": transport}
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0", "--json",
                    env=env)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["usage"]["scorer"]["faults"] == {"connection": 1}
    [record] = [json.loads(line) for line in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    assert record["status"] == "scored" and record["reward"] == round(2.5 / 3, 6)
    assert judge.requests == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_headers_httpx_reads_and_aiohttp_refuses_name_the_other_transport(
        tmp_path: Path, raw_judge: Callable[..., RawJudge], transport: str) -> None:
    """A header line over 8190 bytes (or over 128 headers) is valid HTTP to httpx, and every answer fails on
    the SDK's aiohttp transport, the default: the failure must say how to switch (AMARIS_HTTP_CLIENT=httpx)."""
    if transport == "aiohttp":
        pytest.importorskip("aiohttp")
    big = _answer(b"X-Trace: " + b"t" * 9000 + b"\r\n")
    judge = raw_judge(big, big)
    run = new_run(tmp_path)
    env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": PLANTED_KEY, "AMARIS_HTTP_CLIENT": transport,
           "AMARIS_SCORER_MAX_ATTEMPTS": "2"}
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0", env=env)
    [record] = [json.loads(line) for line in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    if transport == "httpx":
        assert result.exit_code == 0 and record["reward"] == round(2.5 / 3, 6), result.stderr
    else:
        assert result.exit_code == 4 and record["status"] == "failed" and "Traceback" not in result.stderr
        assert "8190 bytes" in record["error"] and "AMARIS_HTTP_CLIENT=httpx" in record["error"], record["error"]


def test_a_request_a_server_holds_after_a_refusal_says_it_was_not_sent_and_when_it_will_be(sim_factory) -> None:
    """A server (recheck_after) holds a refused key for a while: the requests that follow are not sent. Their
    error read as the first one's, "answered HTTP 401", of an answer they never got, and said nothing of when
    the endpoint is asked again: a client could not tell a fresh refusal from a held one, nor whether to wait or
    restart. A command holds the refusal for good: its later requests fail with the answer as it came."""
    judge = sim_factory(agent_faults={"scorer": "401"})
    settings = _settings(judge.base_url)

    async def twice(recheck_after: float | None) -> list[str]:
        client = LLMClient(settings, environ={"AMARIS_TEST_KEY": PLANTED_KEY}, recheck_after=recheck_after)
        messages = scorer_messages(AgentKit(settings=settings, client=client), RUBRIC, ROLLOUT, 0)
        errors = []
        try:
            for _ in range(2):
                with pytest.raises(EndpointFatal) as caught:
                    await client.ask("scorer", messages, ScorerAnswer, step=0, context="r1")
                errors.append(str(caught.value))
        finally:
            await client.aclose()
        return errors

    refused, held = asyncio.run(twice(30.0))
    assert judge.stats["requests"] == 1
    assert "HTTP 401" in refused and "not sent" not in refused
    assert held.startswith("not sent") and re.search(r"holds for (29|30)s more", held) and refused in held
    first, second = asyncio.run(twice(None))
    assert second == first


def test_requests_waiting_for_a_slot_when_the_key_is_refused_are_not_sent(sim_factory) -> None:
    """The endpoint has answered; then it refuses the key. The requests that waited for a request slot meanwhile
    were sent one after another as slots freed, each refused again: the refusal now stops them before they go."""
    judge = sim_factory()
    settings = load_settings(environ={}, flags={"llm": {"concurrency": 1}, "agents": {"default": {
        "base_url": judge.base_url, "model": "judge-model", "api_key_env": "AMARIS_TEST_KEY"}}})

    async def main() -> tuple[int, list[BaseException | None]]:
        client = LLMClient(settings, environ={"AMARIS_TEST_KEY": PLANTED_KEY})
        kit = AgentKit(settings=settings, client=client)

        def ask(i: int) -> Any:
            rollout = ROLLOUT.model_copy(update={"id": f"r{i}", "output": f"{i} + 42 - {i} = 42.\nFinal answer: 42"})
            return client.ask("scorer", scorer_messages(kit, RUBRIC, rollout, 0), ScorerAnswer, step=0, context=f"r{i}")

        try:
            await ask(0)
            judge.config.agent_faults["scorer"] = "401"
            before = judge.stats["requests"]
            results = await asyncio.gather(*(ask(i) for i in range(1, 7)), return_exceptions=True)
            return judge.stats["requests"] - before, [r if isinstance(r, BaseException) else None for r in results]
        finally:
            await client.aclose()

    sent, errors = asyncio.run(main())
    assert all(isinstance(e, EndpointFatal) and "HTTP 401" in str(e) for e in errors), errors
    assert sent == 1


@pytest.mark.timeout(60)
def test_a_key_rejected_after_the_endpoint_answered_the_run_costs_one_request_per_command(
        tmp_path: Path, sim_factory) -> None:
    """A run's endpoint answered step 0; then the key is revoked. Step 1 may send a request per slot at once
    (the endpoint was confirmed a moment ago); its 401 is in calls.jsonl, so step 2 must go alone again,
    not send a full round of requests with the rejected key (every following command of a trainer did)."""
    judge = sim_factory()
    run = new_run(tmp_path)
    env = judge_env(judge, AMARIS_SCORER_CONCURRENCY="16")
    assert invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0", env=env).exit_code == 0
    judge.config.agent_faults["scorer"] = "401"
    judge.keep_requests = True
    for step in (1, 2):
        result = invoke("score", EXAMPLES / "math" / f"step-00{step}.jsonl", "--run", run, "--step", str(step),
                        "--rubric-version", "0", env=env)
        assert result.exit_code == 2 and "HTTP 401" in result.stderr, result.stderr
        assert not (run / f"steps/00000{step}/scores.jsonl").exists(), "no rollout judged or failed"
    # Requests are counted by the step whose rollout they carry, once the judge has read them all: under load
    # it reads some of step 1's requests while step 2 runs (they were sent before its command ended).
    deadline, seen = time.monotonic() + 10, -1
    while seen != judge.stats["requests"] and time.monotonic() < deadline:
        seen = judge.stats["requests"]
        time.sleep(0.5)
    sent = Counter(step for r in judge.requests for step in (1, 2)
                   if any(row["output"] in r["messages"][-1]["content"]
                          for row in read_jsonl(EXAMPLES / "math" / f"step-00{step}.jsonl")))
    assert sent[2] == 1 and sent[1] >= 1, sent


def test_the_endpoint_confirmation_takes_the_newest_request_and_no_time_ahead_of_the_clock(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from amaris_cli.llm.calllog import answered_recently

    url, log = "http://127.0.0.1:9/v1", tmp_path / "calls.jsonl"
    now = datetime.now(UTC)
    recent = (now - timedelta(minutes=5)).isoformat(timespec="seconds")
    later = (now - timedelta(minutes=1)).isoformat(timespec="seconds")
    log.write_bytes(_log_row(recent) + _log_row(later, response=None, error="the scorer endpoint answered HTTP 401"))
    assert not answered_recently(log, url, "judge-model", 3600), "a rejection after the last answer"
    log.write_bytes(log.read_bytes() + _log_row(later, model="other", response=None, error="HTTP 401")
                    + _log_row(later, source="cache"))
    assert not answered_recently(log, url, "judge-model", 3600), "lines of another model or the cache do not hide it"
    log.write_bytes(log.read_bytes() + _log_row(later))
    assert answered_recently(log, url, "judge-model", 3600), "answered again after the failure"
    log.write_bytes(_log_row("9999-12-31T23:59:59+00:00"))
    assert not answered_recently(log, url, "judge-model", 3600), "a time ahead of the clock"
    for torn in (b'[1, 2]\n', b'"text"\n', b'null\n', b'{"ts": 5, "source": "model", "base_url": "' + url.encode()
                 + b'", "model": "judge-model", "response": "{}"}\n', b"\xff\xfe garbage\n", b'{"ts": "2026'):
        log.write_bytes(_log_row(recent) + torn)
        assert answered_recently(log, url, "judge-model", 3600), torn


def test_an_answer_sent_before_a_refusal_does_not_tell_a_server_console_the_endpoint_answers_again(sim_factory) -> None:
    """A server (recheck_after): request A goes out, then B, and B's refusal (the key revoked meanwhile) comes before
    A's answer. The refusal still holds (C is not sent), yet the console said the endpoint "answers again, 0s after it
    refused a request": an operator read that the key worked again while every judgement failed at once."""
    judge = sim_factory(latency=0.4, fault_plan=["", "401", ""])
    settings = _settings(judge.base_url)
    said: list[str] = []

    async def main() -> BaseException | None:
        client = LLMClient(settings, environ={"AMARIS_TEST_KEY": PLANTED_KEY}, recheck_after=30.0, say=said.append)
        kit = AgentKit(settings=settings, client=client)

        def ask(i: int) -> Any:
            rollout = ROLLOUT.model_copy(update={"id": f"r{i}", "output": f"{i} + 42 - {i} = 42.\nFinal answer: 42"})
            return client.ask("scorer", scorer_messages(kit, RUBRIC, rollout, 0), ScorerAnswer, step=0, context=f"r{i}")

        try:
            await ask(0)  # the endpoint answers: confirmed, requests go at once
            refused = asyncio.ensure_future(ask(1))
            await asyncio.sleep(0.2)
            answered = await ask(2)  # sent before the refusal came, answered after it
            assert answered.value is not None
            with pytest.raises(EndpointFatal):
                await refused
            try:
                await ask(3)
            except EndpointFatal as exc:
                return exc
            return None
        finally:
            await client.aclose()

    held = asyncio.run(main())
    assert held is not None and str(held).startswith("not sent"), held
    assert sum("judgements fail at once" in s for s in said) == 1, said
    assert not any("answers again" in s for s in said), said
