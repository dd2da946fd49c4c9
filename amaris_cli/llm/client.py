"""Calling agents through any OpenAI-compatible endpoint with the official `openai` SDK.

The SDK's own retries are off (max_retries=0): amaris retries itself so that every attempt is
counted, backoff honours Retry-After, and the failure policy is explicit. One logical question
(`ask`) may send several requests: transport retries repeat the same request; a reply that is
not valid JSON of the expected shape is re-asked once with the validation error, which is a
new request (and a new line in calls.jsonl). A question that finally fails returns an error,
never a made-up value.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from amaris_cli.config import AGENTS, AgentSettings, Settings
from amaris_cli.llm.cache import CallCache
from amaris_cli.llm.calllog import CallLog, CallRecord, Usage, Written
from amaris_cli.llm.hashing import request_hash
from amaris_cli.llm.parsing import ReplyError, extract_json_object
from amaris_cli.rundir import now_iso

T = TypeVar("T", bound=BaseModel)

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524}
MAX_RETRY_AFTER = 120.0


@dataclass
class AgentUsage:
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    reasks: int = 0
    failures: int = 0
    replayed: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


@dataclass
class Answer(Generic[T]):
    value: T | None
    error: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Transient(Exception):
    def __init__(self, message: str, kind: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


class _Fatal(Exception):
    pass


@dataclass
class _Reply:
    text: str
    usage: Usage
    written: Written | None = None  # where the log holds it (indexed once amaris knows if it used it)
    request_hash: str = ""
    indexable: bool = True  # false when the log line is a pointer to an earlier answer


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    if ms := headers.get("retry-after-ms"):
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


class LLMClient:
    """One per command. `ask` is safe to call concurrently; limits apply overall and per agent."""

    def __init__(
        self,
        settings: Settings,
        call_log: CallLog | None = None,
        environ: Mapping[str, str] | None = None,
        cache: CallCache | None = None,
    ) -> None:
        self.settings = settings
        self.call_log = call_log or CallLog(None)
        self.environ = os.environ if environ is None else environ
        self.cache = cache
        # Resolved once: every request of an agent uses the same settings and parameters.
        self._agents = {a: settings.agent(a) for a in AGENTS}
        self._params: dict[tuple[str, type[BaseModel]], dict[str, Any]] = {}
        self._global = asyncio.Semaphore(settings.llm.concurrency)
        self._agent_limits = {a: asyncio.Semaphore(s.concurrency) for a, s in self._agents.items()}
        self._clients: dict[tuple[str | None, str], Any] = {}
        self._secrets = {v for s in self._agents.values() if (v := self.environ.get(s.api_key_env))}
        self.usage: dict[str, AgentUsage] = {}

    # --- plumbing -----------------------------------------------------------------------
    def _client(self, agent: AgentSettings) -> Any:
        key = (agent.base_url, agent.api_key_env)
        if key not in self._clients:
            from openai import AsyncOpenAI  # heavy import, only when a call is made

            self._clients[key] = AsyncOpenAI(
                api_key=self.environ.get(agent.api_key_env) or "not-set",
                base_url=agent.base_url,
                max_retries=0,
            )
        return self._clients[key]

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "[redacted]")
        return text

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    def params_for(self, agent: AgentSettings, name: str, schema: type[BaseModel]) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": agent.temperature, agent.token_limit_param: agent.max_tokens}
        if agent.response_format == "json_object":
            params["response_format"] = {"type": "json_object"}
        elif agent.response_format == "json_schema":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema.model_json_schema(), "strict": False},
            }
        if agent.service_tier:
            params["service_tier"] = agent.service_tier
        if agent.extra_body:
            params["extra_body"] = agent.extra_body
        return params

    # --- one request, with transport retries --------------------------------------------
    async def _send_once(self, agent: AgentSettings, messages: list[dict[str, Any]], params: dict[str, Any]) -> _Reply:
        import openai

        client = self._client(agent)
        kwargs = {k: v for k, v in params.items() if k != "extra_body"}
        try:
            completion = await client.chat.completions.create(
                model=agent.model,
                messages=messages,
                timeout=agent.timeout,
                extra_body=params.get("extra_body"),
                **kwargs,
            )
        except openai.APITimeoutError:
            raise _Transient(f"timed out after {agent.timeout:g}s (raise agents.*.timeout if the judge is slow)", "timeout") from None
        except openai.APIConnectionError as exc:
            raise _Transient(f"connection failed: {exc.__cause__ or exc}", "connection") from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            detail = str(getattr(exc, "message", exc))[:300]
            if status in RETRYABLE_STATUS:
                kind = "rate_limit" if status == 429 else f"http_{status}"
                hint = " (rate limited: reduce --concurrency or wait)" if status == 429 else ""
                raise _Transient(f"HTTP {status}{hint}: {detail}", kind, _retry_after(exc.response.headers)) from None
            if status in (401, 403):
                raise _Fatal(f"HTTP {status} from {agent.base_url or 'the default endpoint'}: authentication failed; check the key in ${agent.api_key_env}") from None
            if status == 404:
                raise _Fatal(f"HTTP 404: model {agent.model!r} or endpoint {agent.base_url or 'default'} not found: {detail}") from None
            hint = ""
            if status == 400 and "max_tokens" in detail and "max_completion_tokens" in detail:
                hint = " (set token_limit_param = \"max_completion_tokens\" for this agent)"
            elif status == 400 and "response_format" in params:
                hint = " (if the endpoint rejects response_format, set response_format = \"json_object\" or \"text\")"
            raise _Fatal(f"HTTP {status}: {detail}{hint}") from None
        except openai.APIResponseValidationError as exc:
            raise _Transient(f"malformed response body: {exc}", "malformed_body") from None
        except (ValueError, TypeError) as exc:  # body that is not JSON at all
            raise _Transient(f"malformed response body: {exc}", "malformed_body") from None
        choices = getattr(completion, "choices", None)
        if not choices:
            raise _Transient("the response had no choices", "empty_choices")
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None) if message is not None else None
        if not isinstance(text, str):
            raise _Transient("the response had no message content", "empty_content")
        usage = getattr(completion, "usage", None)
        return _Reply(
            text=text,
            usage=Usage(
                prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            ),
        )

    async def _request(
        self, name: str, step: int | None, context: str, messages: list[dict[str, Any]], schema: type[BaseModel],
        fresh: bool = False,
    ) -> _Reply:
        agent = self._agents[name]
        if (name, schema) not in self._params:
            self._params[name, schema] = self.params_for(agent, name, schema)
        params = self._params[name, schema]
        rhash = request_hash(name, agent.model, messages, params)
        usage = self.usage.setdefault(name, AgentUsage())

        def record(reply: _Reply | None, error: str | None, attempts: int, started: float, source: str = "model",
                   pointer: bool = False) -> Written | None:
            return self.call_log.write(
                CallRecord(
                    ts=now_iso(), agent=name, step=step, context=context, request_hash=rhash,
                    model=agent.model, base_url=agent.base_url, messages=None if pointer else messages,
                    params=params, response=reply.text if reply and not pointer else None,
                    usage=reply.usage if reply else Usage(),
                    latency_s=round(time.monotonic() - started, 4), attempts=attempts,
                    error=self.redact(error) if error else None, source=source,  # type: ignore[arg-type]
                )
            )

        if self.cache is not None:
            cached = self.cache.lookup(rhash, name, step, context, agent.model, messages, params, fresh=fresh)
            if cached is not None:
                reply = _Reply(text=cached.record.response or "", usage=cached.record.usage, request_hash=rhash)
                usage.replayed += 1
                usage.prompt_tokens += reply.usage.prompt_tokens
                usage.completion_tokens += reply.usage.completion_tokens
                # A replay's answer is recorded in full (this run then replays on its own); an answer from
                # this run's own log is recorded as a pointer to the line that holds it.
                pointer = cached.origin == "cache"
                reply.written = record(reply, None, 0, time.monotonic(), cached.origin, pointer=pointer)
                reply.indexable = not pointer
                return reply

        started = time.monotonic()
        last_error = "no attempt made"
        for attempt in range(1, agent.max_attempts + 1):
            try:
                async with self._agent_limits[name], self._global:
                    usage.requests += 1
                    reply = await self._send_once(agent, messages, params)
            except _Transient as exc:
                usage.fault(exc.kind)
                last_error = str(exc)
                if attempt == agent.max_attempts:
                    break
                usage.retries += 1
                await asyncio.sleep(self._backoff(attempt, exc.retry_after))
                continue
            except _Fatal as exc:
                record(None, str(exc), attempt, started)
                raise
            usage.prompt_tokens += reply.usage.prompt_tokens
            usage.completion_tokens += reply.usage.completion_tokens
            reply.request_hash = rhash
            reply.written = record(reply, None, attempt, started)
            return reply
        error = f"gave up after {agent.max_attempts} attempts: {last_error}"
        record(None, error, agent.max_attempts, started)
        raise _Fatal(error)

    def _remember(self, reply: _Reply, accepted: bool) -> None:
        if reply.indexable:
            self.call_log.index(reply.written, reply.request_hash, accepted)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        base = self.settings.llm.retry_base_delay
        cap = self.settings.llm.retry_max_delay
        delay = random.uniform(0, min(cap, base * 2 ** (attempt - 1)))  # full jitter
        if retry_after is not None:
            delay = max(delay, min(retry_after, MAX_RETRY_AFTER))
        return delay

    # --- one question ---------------------------------------------------------------------
    async def ask(
        self,
        agent: str,
        messages: list[dict[str, Any]],
        schema: type[T],
        *,
        step: int | None = None,
        context: str = "",
        check: Callable[[T], None] | None = None,
        parse: Callable[[dict[str, Any]], T] | None = None,
        reasks: int | None = None,
        fresh: bool = False,
    ) -> Answer[T]:
        """Ask `agent`; return the validated answer or the reason there is none.

        `parse` turns the JSON object into the model (default: `schema.model_validate`); `check`
        tests it against the request (e.g. one verdict per criterion) and raises ValueError. `fresh`
        asks the model even when this run's log holds an accepted answer (retrying a failed record).
        """
        usage = self.usage.setdefault(agent, AgentUsage())
        answer: Answer[T] = Answer(value=None, error=None)
        convo = list(messages)
        if reasks is None:
            reasks = self._agents[agent].max_reasks
        for round_ in range(reasks + 1):
            try:
                reply = await self._request(agent, step, context, convo, schema, fresh=fresh)
            except _Fatal as exc:
                usage.failures += 1
                answer.error = self.redact(str(exc))
                return answer
            answer.prompt_tokens += reply.usage.prompt_tokens
            answer.completion_tokens += reply.usage.completion_tokens
            try:
                data = extract_json_object(reply.text)
                value = parse(data) if parse else schema.model_validate(data)
                if check:
                    check(value)
                answer.value = value
                self._remember(reply, accepted=True)
                return answer
            except (ReplyError, ValidationError, ValueError) as exc:
                self._remember(reply, accepted=False)
                problem = _describe(exc)
                answer.error = self.redact(f"invalid answer: {problem}")
                if round_ < reasks:
                    usage.reasks += 1
                    convo = [
                        *messages,
                        {"role": "assistant", "content": reply.text[:4000]},
                        {"role": "user", "content": f"Your answer could not be used: {problem}\n"
                         "Reply again with only the corrected JSON object."},
                    ]
        usage.failures += 1
        return answer


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err["loc"]) or "(answer)"
            parts.append(f"{loc}: {err['msg']}")
        return "; ".join(parts)
    return str(exc)
