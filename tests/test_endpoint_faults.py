"""What an endpoint does besides answering well (issue 13): deadlines, malformed 200 bodies, fatal
answers that stop the stage, rate limits, Retry-After, and secrets in replies and base URLs.

All of it over HTTP against the sim-judge, through the real CLI and openai SDK."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest

from amaris_cli.llm.ratelimit import RateLimiter
from amaris_cli.terminal import terminal_safe
from tests.conftest import (
    EXAMPLES,
    PLANTED_KEY,
    TEST_CONFIG,
    invoke,
    judge_env,
    new_run,
    read_jsonl,
    scores,
    write_jsonl,
)

ROLLOUTS = [
    {"id": "right", "input": "What is 6*7?", "output": "First 6*7 = 42, so the result is 42.\nFinal answer: 42", "answer": "42"},
    {"id": "wrong", "input": "What is 6*7?", "output": "First 6*7 = 41, so the result is 41.\nFinal answer: 41", "answer": "42"},
]
MEANT = {"right": round(2.5 / 3, 6), "wrong": round(0.5 / 3, 6)}
SIXTEEN = EXAMPLES / "math" / "step-000.jsonl"


# --- deadlines ------------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_a_body_dripped_a_byte_at_a_time_is_cut_at_the_timeout(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "drip"}, drip_interval=0.1)  # each read well within the timeout
    run = new_run(tmp_path)
    env = judge_env(judge, AMARIS_SCORER_TIMEOUT="1", AMARIS_SCORER_MAX_ATTEMPTS="2")
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0",
                    "--json", env=env)
    ended = time.monotonic()
    assert result.exit_code == 4
    record = scores(run)["right"]
    assert record["status"] == "failed" and "timed out after 1s" in record["error"]
    assert json.loads(result.stdout)["usage"]["scorer"]["faults"] == {"timeout": 2}
    [call] = read_jsonl(run / "calls.jsonl")
    assert call["latency_s"] >= 2.0, "two attempts of one second each"
    # Each attempt is cut at its 1 s timeout (uncut, the dripped body holds it for tens of seconds), timed from
    # the judge's arrivals: the call's latency_s and the command's time also hold its first request's setup
    # (the SDK's import), seconds under CPU load (it failed 5 of 9 runs beside a CPU hog).
    first, second = judge.arrivals
    assert second - first < 2.0, "the first attempt is cut at its timeout, then a short backoff"
    assert ended - second < 2.0, "the second attempt is cut at its timeout"


# --- malformed 200 bodies ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["bad_usage", "choices_object", "choices_number", "content_not_string", "malformed"])
def test_a_malformed_200_body_is_retried_and_counted(tmp_path: Path, sim_factory, kind: str) -> None:
    judge = sim_factory(fault_plan=[kind])
    run = new_run(tmp_path)
    env = judge_env(judge, AMARIS_SCORER_CONCURRENCY="1")
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    assert {rid: r["reward"] for rid, r in scores(run).items()} == MEANT
    assert json.loads(result.stdout)["usage"]["scorer"]["faults"] == {"malformed_body": 1}
    assert sorted(c["attempts"] for c in read_jsonl(run / "calls.jsonl")) == [1, 2]


def test_a_persistently_malformed_body_fails_the_rollouts_without_a_traceback(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "choices_number"})
    run = new_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 4 and "Traceback" not in result.stderr
    for record in scores(run).values():
        assert record["status"] == "failed" and "gave up after 4 attempts: malformed response body: choices" in record["error"]


def test_an_error_in_amaris_own_code_is_not_retried_as_a_bad_answer(tmp_path: Path, sim, monkeypatch) -> None:
    import amaris_cli.llm.client as client

    def broken(body: bytes) -> None:
        raise TypeError("a bug in amaris")

    monkeypatch.setattr(client, "read_completion", broken)
    run = new_run(tmp_path)
    with pytest.raises(TypeError, match="a bug in amaris"):
        invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=judge_env(sim))
    assert sim.stats["requests"] == 1


# --- fatal endpoint answers -------------------------------------------------------------------------

FATAL = [
    ("401", ["HTTP 401", "the API key was rejected", "$OPENAI_API_KEY"]),
    ("403", ["HTTP 403", "$OPENAI_API_KEY", "permissions"]),
    ("404", ["HTTP 404", "agents.scorer.model", "base URL"]),
    # A 429 for an account out of credit was a rate limit: retried, waited out as an outage at every step
    # ("lower requests_per_minute, or wait"), and every rollout failed.
    ("quota", ["HTTP 429 insufficient_quota", "no quota left", "You exceeded your current quota", "$OPENAI_API_KEY"]),
    ("redirect", ["HTTP 302", "redirect to http://127.0.0.1", "/login", "set the base URL"]),
    ("html", ["an HTML page (text/html)", "check the base URL"]),
    ("event_stream", ["event stream (text/event-stream)", "no streaming was requested"]),
]


@pytest.mark.parametrize(("kind", "says"), FATAL)
def test_a_fatal_endpoint_answer_stops_the_stage_after_one_request(tmp_path: Path, sim_factory, kind: str,
                                                                  says: list[str]) -> None:
    judge = sim_factory(agent_faults={"scorer": kind})
    run = new_run(tmp_path)
    result = invoke("score", SIXTEEN, "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 2, result.stderr
    assert judge.stats["requests"] == 1, "the other 15 rollouts must not be sent"
    message = " ".join(result.stderr.split())
    assert f"the scorer endpoint {judge.base_url}" in message
    for text in says:
        assert text in message, (text, message)
    assert "response_format" not in message
    assert not (run / "steps/000000/scores.jsonl").exists(), "no rollout is recorded as judged or failed"
    [call] = read_jsonl(run / "calls.jsonl")
    assert call["response"] is None and call["error"]


def test_loop_prints_the_endpoint_reason_not_a_count_of_failed_rollouts(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "401"})
    run = new_run(tmp_path)
    result = invoke("loop", EXAMPLES / "math", "--run", run, env=judge_env(judge))
    assert result.exit_code == 2
    message = " ".join(result.stderr.split())
    assert "HTTP 401" in message and "$OPENAI_API_KEY" in message
    assert "could not be judged" not in message
    assert judge.stats["requests"] == 1


def test_the_response_format_hint_only_follows_errors_about_response_format(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "400"})
    run = new_run(tmp_path)
    rollouts = write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1])
    assert invoke("score", rollouts, "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 4
    error = scores(run)["right"]["error"]
    assert "HTTP 400: This model's maximum context length" in error and "response_format" not in error
    healthy = sim_factory()
    run = new_run(tmp_path, "rf")
    env = judge_env(healthy)
    path = tmp_path / "rf.toml"
    path.write_text(TEST_CONFIG + '\n[agents.scorer]\nextra_body = { response_format = { type = "bogus" } }\n')
    run = tmp_path / "rf2"
    assert invoke("init", run, "--config", path).exit_code == 0
    result = invoke("score", write_jsonl(tmp_path / "r2.jsonl", ROLLOUTS[:2]), "--run", run, "--step", "0", env=env)
    # A rejected response_format is detected at the first answer and reported, as other fatal endpoint answers
    # are (it was retried, then failed, rollout by rollout).
    assert result.exit_code == 2, result.stderr
    assert "unsupported response_format" in result.stderr and "agents.scorer.response_format" in result.stderr
    assert healthy.stats["requests"] == 1


# --- rate limits --------------------------------------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("latency", [0.0, 0.5], ids=["answers at once", "answers in 0.5 s"])
def test_requests_per_minute_spaces_the_requests_before_they_are_sent(tmp_path: Path, sim_factory,
                                                                       latency: float) -> None:
    judge = sim_factory(latency=latency)
    run = new_run(tmp_path)
    rows = [dict(ROLLOUTS[i % 2], id=f"r{i}") for i in range(10)]
    env = judge_env(judge, AMARIS_SCORER_REQUESTS_PER_MINUTE="240")  # 4 per second, at most 4 at once
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", rows), "--run", run, "--step", "0", env=env)
    assert result.exit_code == 0, result.stderr
    arrivals = judge.arrivals
    assert len(arrivals) == 10
    # A token bucket: the j - i + 1 requests from i to j need (j - i + 1 - 4) / 4 seconds. Requests took their budget,
    # then waited (for the SDK's import, for the first request's answer) while the bucket refilled: five, then seven,
    # arrived at once.
    for i in range(len(arrivals)):
        for j in range(i + 4, len(arrivals)):
            assert arrivals[j] - arrivals[i] >= (j - i - 3) / 4 - 0.05, (i, j, [round(a - arrivals[0], 3) for a in arrivals])
    assert arrivals[-1] - arrivals[0] >= 1.3  # 4 at once, then 6 more at 4 per second (1.5 s)


def test_tokens_per_minute_waits_for_the_estimate_and_is_corrected_by_usage() -> None:
    async def run() -> tuple[float, float, float]:
        limiter = RateLimiter(None, 6000)  # 100 tokens a second, at most 100 at once
        first = await limiter.acquire(100)
        second = await limiter.acquire(100)  # the bucket is empty: about one second
        limiter.settle(100, 20)  # the request used 20 tokens, not 100: 80 come back
        third = await limiter.acquire(100)  # needs only the missing 20: about 0.2 s
        return first, second, third

    first, second, third = asyncio.run(run())
    assert first < 0.05 and 0.9 <= second < 1.3 and 0.1 <= third < 0.45


@pytest.mark.timeout(30)
def test_retry_after_is_honoured_only_up_to_retry_max_delay(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(fault_plan=["429"], retry_after=60)  # the endpoint asks for a minute
    run = new_run(tmp_path)
    started = time.monotonic()
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0",
                    env=judge_env(judge))  # the test config caps delays at 0.05 s
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - started < 10


@pytest.mark.timeout(30)
@pytest.mark.parametrize("header", ["soon", "20s", None])
def test_a_429_whose_retry_after_is_no_delay_is_retried(tmp_path: Path, sim_factory, header: str | None) -> None:
    """A Retry-After that is neither seconds nor an HTTP date (a proxy's "soon", "20s") ended the command with a
    ValueError traceback (exit 1) at the first 429; now it is a 429 without a wish, retried with backoff."""
    judge = sim_factory(fault_plan=["429", "429"], retry_after=header)
    run = new_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0",
                    "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["usage"]["scorer"]["faults"] == {"rate_limit": 2}
    assert [r["status"] for r in scores(run).values()] == ["scored"]


# --- secrets and terminal text ---------------------------------------------------------------------------

def test_a_key_echoed_by_the_endpoint_is_redacted_from_replies_reasons_and_output(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "echo_auth"})
    run = new_run(tmp_path)
    source = write_jsonl(tmp_path / "l.jsonl", [dict(r, step=0) for r in ROLLOUTS])
    result = invoke("loop", source, "--run", run, "--json", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    assert {rid: r["reward"] for rid, r in scores(run).items()} == MEANT
    assert all("Bearer [redacted]" in v["reason"] for r in scores(run).values() for v in r["verdicts"])
    assert PLANTED_KEY not in result.stdout + result.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert PLANTED_KEY.encode() not in path.read_bytes(), path


PASSWORD = "pw-PLANTED-in-the-url-91c3"


def test_credentials_in_a_base_url_never_reach_a_file_or_the_terminal(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(fault_plan=["500", "echo_auth", "echo_auth", "echo_auth"], error_detail=f" (proxy saw {PASSWORD})")
    url = judge.base_url.replace("http://", f"http://amaris-user:{PASSWORD}@")
    env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": PLANTED_KEY}
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    outputs = [invoke("init", run, "--config", config, env=env)]
    source = write_jsonl(tmp_path / "l.jsonl", [dict(r, step=0) for r in ROLLOUTS])
    outputs.append(invoke("loop", source, "--run", run, "--json", env=env))
    assert outputs[-1].exit_code == 0, outputs[-1].stderr
    unauthorized = sim_factory(agent_faults={"scorer": "401"}, error_detail=f" (proxy saw {PASSWORD})")
    bad_env = {"OPENAI_BASE_URL": unauthorized.base_url.replace("http://", f"http://amaris-user:{PASSWORD}@"),
               "OPENAI_API_KEY": PLANTED_KEY}
    outputs.append(invoke("score", source, "--run", run, "--step", "1", env=bad_env))
    assert outputs[-1].exit_code == 2 and unauthorized.base_url in outputs[-1].stderr
    calls = read_jsonl(run / "calls.jsonl")
    assert {c["base_url"] for c in calls} == {judge.base_url, unauthorized.base_url}
    assert any("Basic [redacted]" in v["reason"] for r in scores(run).values() for v in r["verdicts"])
    basic = base64.b64encode(f"amaris-user:{PASSWORD}".encode()).decode()
    for secret in (PASSWORD, basic, PLANTED_KEY):
        for out in outputs:
            assert secret not in out.stdout + out.stderr
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), (secret, path)


QUERY_KEY = "qk-PLANTED-in-the-query-5e1a"


@pytest.mark.parametrize("given_as", ["environment", "flag"])
def test_a_key_in_a_base_urls_query_never_reaches_a_file_or_the_terminal(tmp_path: Path, sim_factory, given_as) -> None:
    """Gateways that take the key as a query parameter (`?key=...`): the URL's query goes with every request
    (the SDK alone would put the path after it), and the URL is written (calls.jsonl, provenance's flags, errors) with every query value but the API version redacted."""
    required = {"api-version": "2024-06-01", "key": QUERY_KEY}  # without them the gateway answers 401
    judge = sim_factory(fault_plan=["500"], error_detail=f" (proxy saw {QUERY_KEY})", required_query=required)
    url = f"{judge.base_url}?api-version=2024-06-01&key={QUERY_KEY}"
    env = {"OPENAI_BASE_URL": url if given_as == "environment" else judge.base_url, "OPENAI_API_KEY": PLANTED_KEY}
    flags = ["--base-url", url] if given_as == "flag" else []
    run = new_run(tmp_path)
    source = write_jsonl(tmp_path / "l.jsonl", ROLLOUTS)
    outputs = [invoke("score", source, "--run", run, "--step", "0", *flags, env=env)]
    assert outputs[-1].exit_code == 0, outputs[-1].stderr
    # A replay that calls the model (another model) takes the URL from its environment: the recorded flag, written
    # redacted, would send "[redacted]" as the key.
    outputs.append(invoke("replay", run, "--out", tmp_path / "replayed", "--model", "another-model", "--json",
                          env={**env, "OPENAI_BASE_URL": url}))
    assert outputs[-1].exit_code == 0, outputs[-1].stderr
    assert json.loads(outputs[-1].stdout)["calls_made"] > 0
    unauthorized = sim_factory(agent_faults={"scorer": "401"}, error_detail=f" (proxy saw {QUERY_KEY})",
                               required_query={"key": QUERY_KEY})
    bad_url = f"{unauthorized.base_url}?key={QUERY_KEY}"
    outputs.append(invoke("score", source, "--run", run, "--step", "1", "--rubric-version", "0", "--base-url", bad_url,
                          env=env))
    assert outputs[-1].exit_code == 2 and f"{unauthorized.base_url}?key=[redacted]" in outputs[-1].stderr
    assert f"{judge.base_url}?api-version=2024-06-01&key=[redacted]" in {c["base_url"] for c in read_jsonl(run / "calls.jsonl")}
    for out in outputs:
        assert QUERY_KEY not in out.stdout + out.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert QUERY_KEY.encode() not in path.read_bytes(), path


def test_a_base_urls_query_is_sent_as_given_and_written_without_its_values() -> None:
    from amaris_cli.llm.endpoint import public_url, query_apart, redact, url_secrets

    url = "http://gw/v1?api-version=2024-06-01&key=ab+cd/ef%3D&tag=x&tag=y&tok-EN-9f2"
    assert query_apart(url) == ("http://gw/v1", "api-version=2024-06-01&key=ab+cd/ef%3D&tag=x&tag=y&tok-EN-9f2")
    assert public_url(url) == "http://gw/v1?api-version=2024-06-01&key=[redacted]&tag=[redacted]&tag=[redacted]&[redacted]"
    # an endpoint echoing the key as written, as a server reads it, or encoded again: redacted each time
    echoed = "saw ab+cd/ef%3D, ab cd/ef=, ab+cd%2Fef%3D and tok-EN-9f2"
    assert redact(echoed, url_secrets(url)) == "saw [redacted], [redacted], [redacted] and [redacted]"


def test_control_characters_from_the_judge_never_reach_the_terminal_or_the_records_raw(tmp_path: Path, sim_factory) -> None:
    hostile = json.dumps({"verdicts": [
        {"criterion_id": "correct-answer", "score": 1, "reason": "ok\x1b[2J\x1b[31m\rfake: all fine\u202e"},
        {"criterion_id": "shows-reasoning", "score": 0.5, "reason": "fine"}]})
    judge = sim_factory(scripted={"scorer": [hostile]}, fault_plan=["", "404"], error_detail="\x1b]0;pwned\x07\x1b[2J")
    run = new_run(tmp_path)
    result = invoke("score", write_jsonl(tmp_path / "r.jsonl", ROLLOUTS[:1]), "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 0, result.stderr
    reason = scores(run)["right"]["verdicts"][0]["reason"]
    assert "\x1b" not in reason and "\r" not in reason and "\\x1b[2J" in reason and "\\u202e" in reason
    result = invoke("score", write_jsonl(tmp_path / "r2.jsonl", ROLLOUTS[1:]), "--run", run, "--step", "1",
                    "--rubric-version", "0", env=judge_env(judge))
    assert result.exit_code == 2 and "HTTP 404" in result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr and "\\x1b]0;pwned" in result.stderr


def test_terminal_safe_shows_control_characters_and_keeps_lines() -> None:
    assert terminal_safe("a\x1b[31mb\rc\x00d\x7f\u202ee\tf\ng") == "a\\x1b[31mb\\rc\\x00d\\x7f\\u202ee\tf\ng"


def test_two_different_choices_are_a_malformed_answer_never_the_first_taken() -> None:
    """amaris asks for one choice. A server that answers with several that differ (a proxy fanning a request out,
    an n set upstream) gave two answers, and which the judge meant cannot be told: the first was read as the
    verdict. Several identical choices are one answer."""
    from amaris_cli.llm.wire import WireError, read_completion

    def body(*contents: str) -> bytes:
        return json.dumps({"choices": [{"index": i, "message": {"role": "assistant", "content": c},
                                        "finish_reason": "stop"} for i, c in enumerate(contents)]}).encode()

    with pytest.raises(WireError, match="2 different choices where one was asked for"):
        read_completion(body('{"score": 1}', '{"score": 0}'))
    assert read_completion(body('{"score": 1}', '{"score": 1}')).text == '{"score": 1}'
    assert read_completion(body('{"score": 1}')).text == '{"score": 1}'
