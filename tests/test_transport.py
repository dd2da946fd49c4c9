"""The lean transport (llm/wire.py) and the cheap call-log line (llm/calllog.py): what they send and write
is what the SDK's typed path and the CallRecord model would, on both of the SDK's HTTP transports.

Everything goes over HTTP to the sim-judge through the real openai SDK."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from amaris_cli.agents.common import AgentKit
from amaris_cli.agents.scorer import ScorerAnswer, scorer_messages
from amaris_cli.config import load_settings
from amaris_cli.jsonio import dumps_line
from amaris_cli.llm.calllog import CallRecord, Usage, call_line
from amaris_cli.llm.client import LLMClient
from amaris_cli.models import Criterion, Rollout, RubricSet
from tests.conftest import EXAMPLES, PLANTED_KEY, TEST_CONFIG, invoke, judge_env, write_jsonl

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
    env = judge_env(sim, AMARIS_TIMEOUT="1", AMARIS_MAX_ATTEMPTS="7", AMARIS_HTTP_CLIENT=transport)
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
