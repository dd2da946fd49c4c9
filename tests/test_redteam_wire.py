"""Red-team tests of the client's send path (llm/wire.py, llm/client.py, the endpoint confirmation in
llm/calllog.py): a judge (or a proxy before it) that answers with broken HTTP, and a key rejected after the
endpoint had answered the run.

A raw HTTP server on 127.0.0.1 plays the judge, reached through the real CLI and openai SDK on both of the
SDK's transports."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, PLANTED_KEY, TEST_CONFIG, invoke, judge_env, write_jsonl

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


def _new_run(tmp_path: Path) -> Path:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config).exit_code == 0
    return run


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
    run = _new_run(tmp_path)
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
    run = _new_run(tmp_path)
    env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": PLANTED_KEY, "AMARIS_HTTP_CLIENT": transport,
           "AMARIS_SCORER_MAX_ATTEMPTS": "2"}
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0", env=env)
    [record] = [json.loads(line) for line in (run / "steps/000000/scores.jsonl").read_text().splitlines()]
    if transport == "httpx":
        assert result.exit_code == 0 and record["reward"] == round(2.5 / 3, 6), result.stderr
    else:
        assert result.exit_code == 4 and record["status"] == "failed" and "Traceback" not in result.stderr
        assert "8190 bytes" in record["error"] and "AMARIS_HTTP_CLIENT=httpx" in record["error"], record["error"]


@pytest.mark.timeout(60)
def test_a_key_rejected_after_the_endpoint_answered_the_run_costs_one_request_per_command(
        tmp_path: Path, sim_factory) -> None:
    """A run's endpoint answered step 0; then the key is revoked. Step 1 may send a request per slot at once
    (the endpoint was confirmed a moment ago); its 401 is in calls.jsonl, so step 2 must go alone again,
    not send a full round of requests with the rejected key (every following command of a trainer did)."""
    judge = sim_factory()
    run = _new_run(tmp_path)
    env = judge_env(judge, AMARIS_SCORER_CONCURRENCY="16")
    assert invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", "0", env=env).exit_code == 0
    judge.config.agent_faults["scorer"] = "401"
    sent = []
    for step in (1, 2):
        before = judge.stats["requests"]
        result = invoke("score", EXAMPLES / "math" / f"step-00{step}.jsonl", "--run", run, "--step", str(step),
                        "--rubric-version", "0", env=env)
        assert result.exit_code == 2 and "HTTP 401" in result.stderr, result.stderr
        assert not (run / f"steps/00000{step}/scores.jsonl").exists(), "no rollout judged or failed"
        sent.append(judge.stats["requests"] - before)
    assert sent[1] == 1, sent


def _log_row(ts: str, **over: object) -> bytes:
    row = {"ts": ts, "agent": "scorer", "step": 0, "context": "", "request_hash": "h", "model": "judge-model",
           "base_url": "http://127.0.0.1:9/v1", "messages": [], "params": {}, "response": "{}",
           "usage": {"prompt_tokens": 0, "completion_tokens": 0}, "finish_reason": "stop", "latency_s": 0.1,
           "attempts": 1, "error": None, "source": "model"}
    return json.dumps({**row, **over}).encode() + b"\n"


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
