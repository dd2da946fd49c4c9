"""Calling agents through any OpenAI-compatible endpoint with the official `openai` SDK.

The SDK's own retries are off (max_retries=0): amaris retries itself so that every attempt is
counted, backoff honours Retry-After (up to `llm.retry_max_delay`), and the failure policy is
explicit. One logical question (`ask`) may send several requests: transport retries repeat the
same request; a reply that breaks the answer contract (llm/parsing.py) is re-asked with the reason,
which is a new request (and a new line in calls.jsonl). A question that finally fails returns an
error, never a made-up value.

Each attempt
  - waits for the agent's rate limits (llm/ratelimit.py) and its concurrency limits;
  - goes alone until the endpoint has answered once: a 401/403/404, a redirect, an HTML page or an
    event stream (llm/endpoint.py) then stops the stage after one request (`EndpointFatal`) instead
    of being repeated for every rollout. An answer from the same base URL and model that the run's
    calls.jsonl recorded in the last hour, with no failure after it, counts as that first answer (see `_endpoint`);
  - has a deadline: `timeout` bounds the whole attempt (a body dripped a byte at a time included),
    on top of the SDK's per-read timeout;
  - reads only the completion's shape (llm/wire.py): a malformed 200 body is a transient fault,
    retried; an error in amaris's own code is not caught as one;
  - names what went wrong on the way (llm/transport.py: refused, dns, tls, timeout, reset).
An endpoint that stops answering (refused, unresolvable, timing out, resetting, 429 or 5xx for every
request) is an outage: its requests are retried with backoff beyond `max_attempts` until the step has
waited `llm.outage_budget` seconds for it in all (said on stderr as it happens), so a judge that is
down for a minute costs time, not rewards. A failure of one request while others get answers is not an
outage: `max_attempts` bounds it. An endpoint that rejects the requested `response_format` is told once
(or, with `response_format = "auto"`, asked again with the next format: json_schema, json_object, text).
Secrets (the keys, credentials inside a base URL) are redacted from replies, reasons and errors
before anything is stored or returned.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from amaris_cli.config import AGENTS, AgentSettings, Settings
from amaris_cli.errors import AmarisError
from amaris_cli.llm.cache import CallCache, OfflineMiss
from amaris_cli.llm.calllog import CallLog, Usage, Written, answered_recently, call_line, usage_row
from amaris_cli.llm.endpoint import (
    EndpointFatal,
    fatal_content_type,
    fatal_status,
    public_url,
    query_apart,
    redact,
    strip_userinfo,
    url_secrets,
)
from amaris_cli.llm.hashing import request_hash
from amaris_cli.llm.parsing import ReplyError, extract_json_object
from amaris_cli.llm.ratelimit import GaveUp, RateLimiter, estimate_tokens
from amaris_cli.llm.schemas import strict
from amaris_cli.llm.transport import classify, is_outage
from amaris_cli.llm.wire import (
    ChatPoster,
    WireError,
    http_client,
    read_completion,
    unparsable_answer,
)
from amaris_cli.prompts import echoed, reask_text
from amaris_cli.rundir import now_iso
from amaris_cli.terminal import one_line

T = TypeVar("T", bound=BaseModel)

# How long an answer recorded in the run's calls.jsonl vouches for its endpoint in later commands.
CONFIRMED_FOR_S = 3600.0
OUTAGE_REPORT_S = 30.0  # how often a continuing outage is said again
OUTAGE_MAX_DELAY_S = 5.0  # during an outage each request tries again at least this often, to notice the end
# 5xx of proxies and providers that pass: Cloudflare's 520-524 (origin down, unreachable, timed out) and
# Anthropic's 529 (overloaded), as well as the standard ones.
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524, 529}


# How a reply ended (`finish_reason`, any case): cut at the token limit, the names servers give it (OpenAI "length",
# Gemini's gateways "MAX_TOKENS", Anthropic's "max_tokens"); or finished, as the servers amaris meets say it (vLLM,
# llama.cpp and Ollama "stop", TGI "eos_token" and "stop_sequence", Anthropic's "end_turn"; none given: finished).
# Anything else (a content filter, an abort, an error) is an unfinished reply: re-asked, never read.
CUT_AT_TOKEN_LIMIT = frozenset({"length", "max_tokens", "max_output_tokens", "token_limit", "model_length"})
FINISHED = frozenset({"stop", "eos", "eos_token", "stop_sequence", "end_turn"})


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
    rate_limited_s: float = 0.0  # seconds spent waiting for requests_per_minute / tokens_per_minute

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


@dataclass
class Answer(Generic[T]):
    value: T | None
    error: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Transient(Exception):
    def __init__(self, message: str, kind: str, retry_after: float | None = None, answered: bool = False,
                 outage: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after
        self.answered = answered  # the endpoint answered over HTTP (it exists and took the request)
        # on every request, the endpoint is down although the kind alone does not say so (is_outage): a bad answer
        # (an error body, a proxy's page) from an endpoint that gave completions before
        self.outage = outage or is_outage(kind)


class _Fatal(Exception):
    """This question cannot be answered (e.g. HTTP 400, or every attempt failed)."""


class _FormatRejected(Exception):
    """The endpoint refused the requested response_format: every request in that format would fail."""

    PREFIX = "the endpoint rejected response_format"


class OutageInterrupted(AmarisError):
    """A request waiting (out an outage, for a Retry-After, or to be retried) was given up because its process
    stops (amaris serve on SIGTERM): it was not answered, and is no failure of the judge's to record (the client
    sends it again)."""


class _Held(Exception):
    """Not sent: the request queued (the endpoint's first contact, a concurrency slot, the rate budget) before the
    endpoint asked that nothing be sent to it until a time still to come (a 429's or 503's Retry-After)."""


class _OutageSpent(Exception):
    """Not sent: the endpoint is still down and the step has waited its whole outage budget for it. Sent, such a
    request would cost one `timeout` against a judge that accepts connections and never answers (and one request
    at a time, as an endpoint that never answered is asked): hours for a step, where the budget says minutes."""


class _Stopped(Exception):
    """Not sent: an earlier request to the same endpoint got a fatal answer."""

    def __init__(self, fatal: EndpointFatal) -> None:
        super().__init__(str(fatal))
        self.fatal = fatal


@dataclass
class _Reply:
    text: str
    usage: Usage
    finish_reason: str | None = None
    written: Written | None = None  # where the log holds it (indexed once amaris knows if it used it)
    request_hash: str = ""
    indexable: bool = True  # false when the log line is a pointer to an earlier answer
    source_accepted: bool | None = None  # a replayed answer: whether the recorded run used it


@dataclass
class _Endpoint:
    """What is known about one endpoint, key and model during a command."""

    confirmed: bool = False  # it has answered over HTTP with something other than a fatal error
    completed: bool = False  # it has answered a well-formed completion (this command, or recently in the run)
    fatal: EndpointFatal | None = None
    fatal_at: float = float("-inf")  # when it came (monotonic)
    refused_since: float | None = None  # a server: the first of the fatal answers since it last answered
    first_contact: asyncio.Lock = field(default_factory=asyncio.Lock)
    formats: list[str] = field(default_factory=list)  # response formats still to try ("auto")
    last_answer: float = float("-inf")  # when it last answered (monotonic)
    down_since: float | None = None  # when requests began to fail with no answer since
    down_reason: str = ""
    told_at: float = float("-inf")  # when the outage was last said
    budget_left: dict[int | None, float] = field(default_factory=dict)  # per step, seconds of outage still to wait
    waiting_since: dict[int | None, float] = field(default_factory=dict)  # per step, while its requests wait
    silent: str | None = None  # why an endpoint that has not answered at all is asked no more (outage budget 0)
    unanswered: int = 0  # attempts without any HTTP answer while it had not answered yet
    probing: bool = False  # a request is sent to see whether an endpoint a step gave up on answers again
    next_probe: float = float("-inf")  # not before then (a failed probe waits OUTAGE_MAX_DELAY_S for the next)
    not_before: float = float("-inf")  # no attempt before then: the endpoint's last Retry-After (within the limit)

    def stop_on(self, fatal: EndpointFatal) -> bool:
        """Hold a fatal answer; whether it is the first since the endpoint last answered."""
        self.fatal, self.fatal_at = fatal, time.monotonic()
        first = self.refused_since is None
        if first:
            self.refused_since = self.fatal_at
        return first

    def held(self, hold: float | None) -> EndpointFatal | None:
        """The fatal answer the endpoint's requests still stop on. A command keeps it (hold None); a server
        that stays up tries the endpoint again `hold` seconds after it came (the key or the model may have
        been fixed meanwhile), one request at a time until it answers, as at first contact."""
        if self.fatal is not None and hold is not None and time.monotonic() - self.fatal_at >= hold:
            self.fatal, self.confirmed = None, False
        return self.fatal

    def answered(self, now: float) -> float | None:
        """An answer came: the outage (if any) is over; returns how long it lasted when it was said."""
        self.last_answer = now
        lasted = None if self.down_since is None or self.told_at == float("-inf") else now - self.down_since
        for step, since in self.waiting_since.items():
            self.budget_left[step] = max(0.0, self.budget_left[step] - (now - since))
        self.waiting_since.clear()
        self.down_since = None
        return lasted

    def spent(self, step: int | None, now: float, budget: float) -> bool:
        """Whether the endpoint is still down and the step has waited its whole outage budget for it."""
        return (budget > 0 and self.down_since is not None and step in self.waiting_since
                and self.outage_left(step, now, budget) <= 0)

    def outage_left(self, step: int | None, now: float, budget: float) -> float:
        """Seconds the step may still wait for the endpoint to come back (its budget counts every second in
        which one of its requests waited, over all outages)."""
        left = self.budget_left.setdefault(step, budget)
        since = self.waiting_since.setdefault(step, now)
        return left - (now - since)


def _seconds(value: float) -> float | None:
    """A wait the endpoint asked for, or None for a value that is none ("nan", "inf", a negative number)."""
    return value if math.isfinite(value) and value >= 0 else None


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    if ms := headers.get("retry-after-ms"):
        try:
            if (wait := _seconds(float(ms) / 1000)) is not None:
                return wait
        except ValueError:
            pass  # unusable: the plain header may still say
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return _seconds(float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (ValueError, TypeError, OverflowError):  # neither seconds nor an HTTP date ("soon", "20s"): no wish
        return None
    return max(0.0, parsed.timestamp() - time.time())


def _endpoint_key(agent: AgentSettings) -> tuple[str | None, str, str]:
    return (agent.base_url, agent.api_key_env, agent.model)


class LLMClient:
    """One per command. `ask` is safe to call concurrently; limits apply overall and per agent."""

    def __init__(
        self,
        settings: Settings,
        call_log: CallLog | None = None,
        environ: Mapping[str, str] | None = None,
        cache: CallCache | None = None,
        say: Callable[[str], None] | None = None,
        recheck_after: float | None = None,
    ) -> None:
        self.settings = settings
        self.recheck_after = recheck_after  # seconds a fatal answer holds (None: for the client's life; _Endpoint.held)
        self.call_log = call_log or CallLog(None)
        self.environ = os.environ if environ is None else environ
        self.cache = cache
        # Resolved once: every request of an agent uses the same settings and parameters.
        self._agents = {a: settings.agent(a) for a in AGENTS}
        self._params: dict[tuple[str, type[BaseModel]], dict[str, Any]] = {}
        self._global = asyncio.Semaphore(settings.llm.concurrency)
        self._agent_limits = {a: asyncio.Semaphore(s.concurrency) for a, s in self._agents.items()}
        self._clients: dict[tuple[str | None, str], ChatPoster] = {}
        self._endpoints: dict[tuple[str | None, str, str], _Endpoint] = {}
        self._limiters: dict[tuple[Any, ...], RateLimiter] = {}
        self._secrets = {v for s in self._agents.values() if (v := self.environ.get(s.api_key_env))}
        for s in self._agents.values():
            self._secrets |= url_secrets(s.base_url)
        self.usage: dict[str, AgentUsage] = {}
        self.say = say or (lambda _text: None)
        self._stopping = asyncio.Event()

    def stop_waiting(self) -> None:
        """End every outage wait now, and every one to come: such a request raises OutageInterrupted instead of
        holding a stopping server for the rest of the outage budget."""
        self._stopping.set()

    # --- plumbing -----------------------------------------------------------------------
    def _client(self, agent: AgentSettings) -> ChatPoster:
        key = (agent.base_url, agent.api_key_env)
        if key not in self._clients:
            from amaris_cli import preload

            preload.settle()
            # The SDK reads `sys.modules.get("httpx")` on every response and takes its attributes: while another
            # thread imports httpx (ChromaDB's import does, in the preload thread or beside an indexing), that
            # module is half initialized and a request failed with "partially initialized module 'httpx' has
            # no attribute 'Response'". Imported here, before the first request, it is whole (60 ms, once).
            import httpx  # noqa: F401
            from openai import AsyncOpenAI  # heavy import, only when a call is made

            http = http_client(self.environ, agent.base_url)
            base_url, query = query_apart(agent.base_url)  # (a gateway's `?key=`, Azure's `?api-version=`)
            client = AsyncOpenAI(api_key=self.environ.get(agent.api_key_env) or "not-set", base_url=base_url,
                                 max_retries=0, http_client=http)
            self._clients[key] = ChatPoster(client, http, query)
        return self._clients[key]

    def redact(self, text: str) -> str:
        return redact(text, self._secrets)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    def _endpoint(self, agent: AgentSettings) -> _Endpoint:
        key = _endpoint_key(agent)
        if key not in self._endpoints:
            # An endpoint that answered this run's requests a moment ago (another command of the run, e.g.
            # the score of the previous step) is taken as confirmed: the first request does not go alone,
            # which would add a whole judge latency to every command of an online run.
            log = self.call_log.path
            recent = log is not None and answered_recently(log, strip_userinfo(agent.base_url), agent.model,
                                                           CONFIRMED_FOR_S)
            self._endpoints[key] = _Endpoint(confirmed=recent, completed=recent)
        return self._endpoints[key]

    def _limiter(self, agent: AgentSettings) -> RateLimiter | None:
        if not agent.requests_per_minute and not agent.tokens_per_minute:
            return None
        # Agents sharing endpoint, key, model and limits share one budget: the provider counts them together.
        key = (*_endpoint_key(agent), agent.requests_per_minute, agent.tokens_per_minute)
        if key not in self._limiters:
            self._limiters[key] = RateLimiter(agent.requests_per_minute, agent.tokens_per_minute)
        return self._limiters[key]

    def params_for(self, agent: AgentSettings, name: str, schema: type[BaseModel],
                   response_format: str | None = None, contract: dict[str, Any] | None = None) -> dict[str, Any]:
        """The request's parameters; `response_format` overrides the agent's (what "auto" tries now). Under
        json_schema the answer's schema is sent strict (llm/schemas.py): `contract` when the caller knows the
        exact shape (the scorer: its rubric's criteria), else the answer model's."""
        fmt = response_format or agent.response_format
        params: dict[str, Any] = {"temperature": agent.temperature, agent.token_limit_param: agent.max_tokens}
        if fmt == "json_object":
            params["response_format"] = {"type": "json_object"}
        elif fmt == "json_schema":
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": contract or strict(schema.model_json_schema()), "strict": True},
            }
        if agent.service_tier:
            params["service_tier"] = agent.service_tier
        if agent.extra_body:
            params["extra_body"] = agent.extra_body
        return params

    # --- one attempt ------------------------------------------------------------------------
    async def _send_once(self, name: str, agent: AgentSettings, body: bytes, payload: dict[str, Any]) -> _Reply:
        poster = self._client(agent)  # first: it waits for the SDK's import in the preload thread
        import openai

        try:
            # The SDK's timeout bounds each read; wait_for bounds the attempt as a whole.
            response = await asyncio.wait_for(poster.post(body, payload, agent.timeout), timeout=agent.timeout)
        except (TimeoutError, openai.APIConnectionError) as exc:  # APITimeoutError is an APIConnectionError
            fault = classify(exc, agent.base_url, agent.timeout, name)
            if fault.kind == "tls":  # a configuration error: no request to it can succeed as it is
                raise EndpointFatal(f"the {name} endpoint {public_url(agent.base_url)}: {fault.reason}") from None
            raise _Transient(self.redact(fault.reason), fault.kind) from None
        except openai.APIStatusError as exc:
            status = exc.status_code
            detail = self.redact(_status_detail(exc))
            fatal = fatal_status(name, agent.base_url, agent.model, agent.api_key_env, status, detail,
                                 exc.response.headers.get("location"), exc.code or exc.type)
            if fatal is not None:
                raise fatal from None
            detail = one_line(detail, 300)
            if status in (400, 415, 422, 500, 501) and "response_format" in payload and _names_format(detail):
                raise _FormatRejected(f"{_FormatRejected.PREFIX} {payload['response_format'].get('type')!r} "
                                      f"(HTTP {status}: {detail})") from None
            if status in RETRYABLE_STATUS:
                kind = "rate_limit" if status == 429 else f"http_{status}"  # 5xx: an outage kind (transport.py)
                hint = " (rate limited: lower requests_per_minute / --concurrency, or wait)" if status == 429 else ""
                raise _Transient(f"HTTP {status}{hint}: {detail}", kind, _retry_after(exc.response.headers),
                                 answered=True) from None
            hint = ""
            if status == 400 and "max_tokens" in detail and "max_completion_tokens" in detail:
                hint = f" (set agents.{name}.token_limit_param = \"max_completion_tokens\")"
            if any(word in detail for word in ("response_format", "json_schema", "json_object")):
                hint += (f" (if the endpoint rejects response_format, set agents.{name}.response_format = "
                         "\"json_object\" or \"text\")")
            self._answered(agent, name)  # it refused this request, so it is up: an outage (if any) is over
            raise _Fatal(f"HTTP {status}: {detail}{hint}") from None
        except Exception as exc:  # last: the SDK's own errors are handled above
            if (broken := unparsable_answer(exc)) is None:
                raise
            raise _Transient(f"connection failed: {one_line(broken, 300)}", "connection") from None
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        # From an endpoint that has given completions, a page or a bad body is a passing fault of it or of a proxy
        # in front of it (maintenance, an error page), waited out as an outage when every request gets one; from one
        # that never has, the base URL or the endpoint is wrong.
        endpoint = self._endpoint(agent)
        completed = endpoint.completed
        fatal = fatal_content_type(name, agent.base_url, agent.model, content_type)
        if fatal is not None and completed:
            raise _Transient(f"the endpoint, which has answered JSON completions, answered {content_type} (an error "
                             "or maintenance page of the endpoint or of a proxy in front of it?)", "page",
                             answered=True, outage=True)
        if fatal is not None:
            raise fatal
        try:
            completion = read_completion(response.content)
        except WireError as exc:
            raise _Transient(self.redact(str(exc)), exc.kind, answered=True, outage=completed) from None
        endpoint.completed = True
        return _Reply(
            text=self.redact(completion.text),
            usage=Usage(prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens),
            finish_reason=completion.finish_reason,
        )

    async def _attempt(self, name: str, agent: AgentSettings, body: bytes, payload: dict[str, Any],
                       usage: AgentUsage, step: int | None, first: bool,
                       meter: Callable[[], Awaitable[None]] | None = None) -> _Reply:
        """One attempt: a concurrency slot, the endpoint's first contact (one request until it answers), then
        `meter` (the rate budget), and the request."""
        endpoint = self._endpoint(agent)

        async def send() -> _Reply:
            try:
                async with self._agent_limits[name], self._global:
                    if (fatal := endpoint.held(self.recheck_after)) is not None:  # it came while this one waited
                        raise self._stopped(endpoint, fatal)
                    budget, now = self.settings.llm.outage_budget, time.monotonic()
                    probe = False
                    # An endpoint that has never answered, after as many attempts as one request makes (when
                    # llm.outage_budget = 0 waits for none): its requests went one at a time, each making every
                    # attempt (hours for a step).
                    silent = endpoint.silent is not None and not endpoint.confirmed
                    if silent or endpoint.spent(step, now, budget):  # checked once a slot is free: it may have
                        # waited for one while the budget ran out. One new request at a time is still sent, to see
                        # whether the endpoint is back (a served step's later rollouts, a client's retry), at most
                        # one every OUTAGE_MAX_DELAY_S (against a judge that never answers each costs a timeout),
                        # and none before the time the endpoint's last Retry-After asked for, whoever it told.
                        if not first or endpoint.probing or now < max(endpoint.next_probe, endpoint.not_before):
                            raise self._outage_spent(name, agent, endpoint)
                        endpoint.probing = probe = True
                    elif endpoint.not_before > time.monotonic():  # asked while this request queued: _request waits
                        raise _Held
                    if meter is not None:
                        await meter()
                        if endpoint.not_before > time.monotonic():  # asked while this one waited for its budget
                            raise _Held
                    wait = OUTAGE_MAX_DELAY_S
                    try:
                        usage.requests += 1
                        return await self._send_once(name, agent, body, payload)
                    except _Transient as exc:  # a look refused with a Retry-After: the next not before then
                        wait = max(wait, self._wish(exc.retry_after) or 0.0)
                        raise
                    finally:
                        if probe:
                            endpoint.probing = False
                            endpoint.next_probe = time.monotonic() + wait
            except EndpointFatal as exc:
                self._stop(endpoint, exc)
                raise

        if (fatal := endpoint.held(self.recheck_after)) is not None:
            raise self._stopped(endpoint, fatal)
        if endpoint.confirmed:
            return await send()
        async with endpoint.first_contact:  # until the endpoint has answered, one request at a time
            if (fatal := endpoint.held(self.recheck_after)) is not None:
                raise self._stopped(endpoint, fatal)
            if not endpoint.confirmed:
                try:
                    reply = await send()
                except _Transient as exc:
                    endpoint.confirmed = exc.answered
                    raise
                endpoint.confirmed = True
                return reply
        return await send()

    def _stop(self, endpoint: _Endpoint, fatal: EndpointFatal) -> None:
        """Hold the endpoint's fatal answer. A server says the first of a series: its requests now fail at once,
        and its operator may fix the key or the model without a restart (a command stops with the answer)."""
        if endpoint.stop_on(fatal) and self.recheck_after is not None:
            self.say(f"{fatal}; judgements fail at once for {self.recheck_after:g}s (--recheck-after), then the "
                     "endpoint is asked again")

    def _stopped(self, endpoint: _Endpoint, fatal: EndpointFatal) -> _Stopped:
        """A request not sent for the endpoint's fatal answer. A command fails it with the answer as it came; a server
        that holds the answer for a while (recheck_after) says so, and when it asks the endpoint again: the answer
        alone reads as one this request got (a fresh refusal), and its advice (fix the key) as needing a restart."""
        if self.recheck_after is None:
            return _Stopped(fatal)
        left = math.ceil(max(endpoint.fatal_at + self.recheck_after - time.monotonic(), 0.0))
        return _Stopped(EndpointFatal(f"not sent (the endpoint's answer to an earlier request holds for {left}s more, "
                                      f"--recheck-after; then it is asked again): {fatal}"))

    def _outage_spent(self, name: str, agent: AgentSettings, endpoint: _Endpoint) -> _OutageSpent:
        """Why a request is not sent: the endpoint never answered (under a budget of 0), or the step spent its
        outage budget."""
        where, budget = f"the {name} endpoint {public_url(agent.base_url)}", self.settings.llm.outage_budget
        if endpoint.silent is not None and not endpoint.confirmed:
            return _OutageSpent(f"{where} has not answered any request yet ({endpoint.silent}); llm.outage_budget = "
                                f"{budget:g} waits for no outage")
        return _OutageSpent(f"{where} has been unreachable for {budget:g}s of this step, llm.outage_budget "
                            f"({endpoint.down_reason})")

    # --- one request, with transport retries --------------------------------------------
    def _format(self, name: str, agent: AgentSettings) -> str:
        """The response format to ask for now: the agent's, or under "auto" the first the endpoint takes."""
        if agent.response_format != "auto":
            return agent.response_format
        endpoint = self._endpoint(agent)
        if not endpoint.formats:
            endpoint.formats = ["json_schema", "json_object", "text"]
        return endpoint.formats[0]

    def _format_rejected(self, name: str, agent: AgentSettings, fmt: str, error: str) -> bool:
        """After a rejection of `fmt`: True when "auto" has another format to try (then it is the current one)."""
        endpoint = self._endpoint(agent)
        if agent.response_format == "auto" and endpoint.formats[:1] == [fmt] and len(endpoint.formats) > 1:
            endpoint.formats.pop(0)
            self.say(f"the {name} endpoint {public_url(agent.base_url)} does not take response_format {fmt!r}: "
                     f"asking with {endpoint.formats[0]!r} from now on")
            return True
        return agent.response_format == "auto" and endpoint.formats[:1] != [fmt]  # another request switched it

    def _outage_wait(self, name: str, agent: AgentSettings, step: int | None, reason: str, failing_since: float,
                     delay: float) -> float | None:
        """How long to wait before trying again during an outage, or None when this failure is not one (the
        endpoint answers other requests) or the step's outage budget is spent."""
        endpoint = self._endpoint(agent)
        now = time.monotonic()
        budget = self.settings.llm.outage_budget
        if budget <= 0 or endpoint.last_answer > failing_since:
            return None  # the endpoint answers others: this request's own failure, bounded by max_attempts
        where = f"the {name} endpoint {public_url(agent.base_url)}"
        if endpoint.down_since is None:
            endpoint.down_since, endpoint.told_at = now, float("-inf")
        endpoint.down_reason = reason
        left = endpoint.outage_left(step, now, budget)
        step_text = "" if step is None else f" (step {step})"
        if left <= 0:
            if endpoint.told_at != float("inf"):
                self.say(f"{where} has been unreachable for {budget:g}s of this step{step_text}, llm.outage_budget: "
                         f"its requests fail from now on ({reason})")
                endpoint.told_at = float("inf")
            return None
        if now - endpoint.told_at >= OUTAGE_REPORT_S:
            since = time.strftime("%H:%M:%S", time.localtime(time.time() - (now - endpoint.down_since)))
            self.say(f"waiting for {where}{step_text}: unreachable since {since} ({reason}); retrying for up to "
                     f"{left:.0f}s more (llm.outage_budget {budget:g}s per step)")
            endpoint.told_at = now
        return min(delay, left)

    def _answered(self, agent: AgentSettings, name: str) -> None:
        endpoint, now = self._endpoint(agent), time.monotonic()
        lasted = endpoint.answered(now)
        if lasted is not None:
            self.say(f"the {name} endpoint {public_url(agent.base_url)} answers again, after {lasted:.1f}s")
        # Back once a request sent after the hold ended is answered: one that was on its way before the refusal
        # and answered after it says nothing of the key (its requests are still not sent).
        if endpoint.refused_since is not None and endpoint.fatal is None:
            if self.recheck_after is not None:
                self.say(f"the {name} endpoint {public_url(agent.base_url)} answers again, "
                         f"{now - endpoint.refused_since:.0f}s after it refused a request")
            endpoint.refused_since = None

    async def _request(
        self, name: str, step: int | None, context: str, messages: list[dict[str, Any]], schema: type[BaseModel],
        budget: int | None = None, contract: dict[str, Any] | None = None,
    ) -> _Reply:
        agent = self._agents[name]
        fmt = self._format(name, agent)
        key = (name, schema, fmt, orjson.dumps(contract) if contract is not None and fmt == "json_schema" else None)
        if key not in self._params:
            self._params[key] = self.params_for(agent, name, schema, fmt, contract)
        params = self._params[key]
        if budget is not None and budget != params[agent.token_limit_param]:
            params = {**params, agent.token_limit_param: budget}
        rhash = request_hash(name, agent.model, messages, params)
        usage = self.usage.setdefault(usage_row(name, context), AgentUsage())

        def record(reply: _Reply | None, error: str | None, attempts: int, started: float, source: str = "model",
                   pointer: bool = False) -> Written | None:
            if self.call_log.path is None:
                return None
            written = self.call_log.write_line(step, call_line(
                ts=now_iso(), agent=name, step=step, context=context, request_hash=rhash,
                model=agent.model, base_url=strip_userinfo(agent.base_url), messages=None if pointer else messages,
                params=params, response=reply.text if reply and not pointer else None,
                usage=reply.usage if reply else Usage(), finish_reason=reply.finish_reason if reply else None,
                latency_s=round(time.monotonic() - started, 4), attempts=attempts,
                error=self.redact(error) if error else None, source=source,  # type: ignore[arg-type]
            ))
            if reply is None and error:  # a failure: a replay of this run fails it the same way
                self.call_log.index(written, rhash, accepted=False, failed=True)
            return written

        if self.cache is not None:
            cached = self.cache.lookup(rhash, name, step, context, agent.model, messages, params)
            if cached is not None and cached.record.response is None:
                # A replay of a request that failed in the source: it fails here the same way, unsent.
                error = cached.record.error or "failed in the recorded run"
                record(None, error, 0, time.monotonic(), cached.origin)
                if error.startswith(_FormatRejected.PREFIX) and self._format_rejected(name, agent, fmt, error):
                    return await self._request(name, step, context, messages, schema, budget, contract)
                raise _Fatal(error)
            if cached is not None:
                reply = _Reply(text=cached.record.response or "", usage=cached.record.usage,
                               finish_reason=cached.record.finish_reason, request_hash=rhash,
                               source_accepted=cached.accepted)
                usage.replayed += 1  # its tokens were spent by the recorded run: this one spent none
                # A replay's answer is recorded in full (this run then replays on its own); an answer from
                # this run's own log is recorded as a pointer to the line that holds it.
                pointer = cached.origin == "cache"
                reply.written = record(reply, None, 0, time.monotonic(), cached.origin, pointer=pointer)
                reply.indexable = not pointer
                return reply

        payload = {"model": agent.model, "messages": messages, **{k: v for k, v in params.items() if k != "extra_body"},
                   **params.get("extra_body", {})}
        body = orjson.dumps(payload)
        limiter = self._limiter(agent)
        estimate = estimate_tokens(messages, int(params[agent.token_limit_param]))
        started = time.monotonic()
        # Since when an answer to another request would show this one's failure to be its own, not an outage: its
        # start, then its last failure (a request in flight when the judge went down was sent before the answers
        # that came just before; judged against its start, it spent its attempts in the first second of an outage).
        failed_at = started
        last_error = "no attempt made"
        attempt = counted = 0
        metered = False  # the attempt took from the rate limiter's budget (meter)
        endpoint, outage_budget = self._endpoint(agent), self.settings.llm.outage_budget

        async def meter() -> None:
            """The attempt's rate budget, taken by _attempt as the last thing before it sends: a budget taken
            before a wait (the first contact's answer, a free slot, the SDK's import) refilled meanwhile, and
            the requests after that wait went out in a burst above the limit. A step that spent its outage
            budget sends nothing but a probe now and then: its requests do not wait for the rate budget, nor
            take from it (they held a step for minutes under a limit)."""
            nonlocal metered
            metered = limiter is not None and not endpoint.spent(step, time.monotonic(), outage_budget)
            if metered and limiter is not None:
                self._client(agent)  # the first request waits for the SDK's import here, not after
                try:  # also a request already waiting here when the step's budget runs out stops waiting
                    usage.rate_limited_s += await limiter.acquire(
                        estimate, give_up=lambda: endpoint.spent(step, time.monotonic(), outage_budget))
                except GaveUp:
                    metered = False
                    raise self._outage_spent(name, agent, endpoint) from None

        while counted < agent.max_attempts:
            attempt += 1
            counted += 1
            # The endpoint asked (a 429's or 503's Retry-After) that nothing be sent to it before then: a request
            # started meanwhile waits too, not only the one refused. A provider counts refused requests against
            # its limit, so each new request sent at once prolonged the wait of all. (A step that spent its outage
            # budget sends only looks, which _attempt holds until then too; its other requests fail at once.)
            # A step waiting out an outage waits no longer than its budget, as the outage's own waits (_outage_wait).
            while (hold := endpoint.not_before - (now := time.monotonic())) > 0 and not endpoint.spent(
                    step, now, outage_budget):
                if outage_budget > 0 and endpoint.down_since is not None and step in endpoint.waiting_since:
                    hold = min(hold, endpoint.outage_left(step, now, outage_budget))
                if self._stopping.is_set() or await _set_within(self._stopping, hold):
                    raise OutageInterrupted(f"not judged: stopping while the {name} endpoint "
                                            f"{public_url(agent.base_url)} asked to wait "
                                            f"({last_error if attempt > 1 else 'Retry-After'})")
            metered = False
            try:
                reply = await self._attempt(name, agent, body, payload, usage, step, attempt == 1, meter)
            except _Transient as exc:
                if not exc.answered and not endpoint.confirmed and outage_budget == 0:
                    # As many attempts as one request makes, over all requests, without a single answer: the next
                    # ones are not sent (_attempt). They went one at a time, each making every attempt.
                    endpoint.unanswered += 1
                    if endpoint.unanswered >= agent.max_attempts:
                        endpoint.silent = str(exc)
                usage.fault(exc.kind)
                last_error = str(exc)
                if (wish := self._wish(exc.retry_after)) is not None:
                    endpoint.not_before = max(endpoint.not_before, time.monotonic() + wish)
                delay = self._backoff(counted, exc.retry_after)
                wait = (self._outage_wait(name, agent, step, last_error, failed_at,
                                          self._outage_delay(attempt, exc.retry_after))
                        if exc.outage else None)
                failed_at = time.monotonic()
                if wait is not None:  # an outage within the step's budget: it does not use up the attempts
                    counted -= 1
                elif counted == agent.max_attempts:
                    break
                elif exc.outage and endpoint.spent(step, time.monotonic(), outage_budget):
                    # The step's budget is spent: _attempt would refuse a retry unsent, so no backoff before it (a
                    # look's Retry-After held the request up to llm.retry_max_delay, deaf to stop_waiting).
                    last_error = str(self._outage_spent(name, agent, endpoint))
                    break
                usage.retries += 1
                if wait is None:  # a retry's backoff, up to llm.retry_max_delay: a stop need not wait it out either
                    if self._stopping.is_set() or await _set_within(self._stopping, delay):
                        raise OutageInterrupted(f"not judged: stopping while a request to the {name} endpoint "
                                                f"{public_url(agent.base_url)} waited to be retried ({last_error})"
                                                ) from None
                elif self._stopping.is_set() or await _set_within(self._stopping, wait):
                    raise OutageInterrupted(f"not judged: stopping while the {name} endpoint "
                                            f"{public_url(agent.base_url)} is unreachable ({last_error})") from None
                continue
            except _Held:
                # It queued when the endpoint asked to wait (a request let go by the refused one was sent at once,
                # to be refused again): not an attempt; it waits at the top of the loop, its rate share given back.
                attempt -= 1
                counted -= 1
                if metered and limiter is not None:
                    limiter.give_back(estimate)
                continue
            except _Stopped as exc:
                raise exc.fatal from None  # nothing was sent: no call to record
            except _OutageSpent as exc:
                error = f"not sent: {exc}" if attempt == 1 else f"gave up after {attempt - 1} attempts: {exc}"
                record(None, error, attempt - 1, started)
                raise _Fatal(error) from None
            except EndpointFatal as exc:
                usage.failures += 1
                record(None, str(exc), attempt, started)
                raise
            except _FormatRejected as exc:
                record(None, str(exc), attempt, started)
                if self._format_rejected(name, agent, fmt, str(exc)):
                    return await self._request(name, step, context, messages, schema, budget, contract)
                fatal = EndpointFatal(f"the {name} endpoint {public_url(agent.base_url)} (model {agent.model!r}): {exc}; "
                                      f"set agents.{name}.response_format to one it takes (\"json_object\", \"text\"), "
                                      "or \"auto\" to fall back by itself")
                self._stop(self._endpoint(agent), fatal)
                raise fatal from None
            except _Fatal as exc:
                record(None, str(exc), attempt, started)
                raise
            self._answered(agent, name)
            if metered and limiter is not None:
                limiter.settle(estimate, reply.usage.prompt_tokens + reply.usage.completion_tokens)
            usage.prompt_tokens += reply.usage.prompt_tokens
            usage.completion_tokens += reply.usage.completion_tokens
            reply.request_hash = rhash
            reply.written = record(reply, None, attempt, started)
            return reply
        error = f"gave up after {attempt} attempts: {last_error}"
        record(None, error, attempt, started)
        raise _Fatal(error)

    def _remember(self, reply: _Reply, accepted: bool) -> None:
        if reply.indexable:
            self.call_log.index(reply.written, reply.request_hash, accepted)

    def _wish(self, retry_after: float | None) -> float | None:
        """The wait the endpoint asked for (Retry-After), within the configured limit llm.retry_max_delay."""
        return None if retry_after is None else min(retry_after, self.settings.llm.retry_max_delay)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        base = self.settings.llm.retry_base_delay
        cap = self.settings.llm.retry_max_delay
        # full jitter; the exponent is bounded, as an outage's retries are not: 2.0 ** 1024 overflows a float
        delay = random.uniform(0, min(cap, base * 2.0 ** min(attempt - 1, 64)))
        return max(delay, self._wish(retry_after) or 0.0)

    def _outage_delay(self, attempt: int, retry_after: float | None) -> float:
        """During an outage a request tries again at least every OUTAGE_MAX_DELAY_S, to notice its end, unless the
        endpoint said when (a 429's Retry-After): a provider that rate-limits counts the requests it refuses
        against the limit, so asking before then prolongs the limit for every request."""
        return max(min(self._backoff(attempt, None), OUTAGE_MAX_DELAY_S), self._wish(retry_after) or 0.0)

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
        max_tokens: int | None = None,
        contract: dict[str, Any] | None = None,
    ) -> Answer[T]:
        """Ask `agent`; return the validated answer or the reason there is none.

        `parse` turns the JSON object into the model (default: `schema.model_validate`); `check`
        tests it against the request (e.g. one verdict per criterion) and raises ValueError.
        `max_tokens` asks for a larger completion budget than the agent's (up to its cap), for
        answers known to be long. `contract`: the answer's exact JSON schema, sent when the format is
        json_schema (llm/schemas.py). Raises EndpointFatal when the endpoint cannot answer at all.
        """
        usage = self.usage.setdefault(usage_row(agent, context), AgentUsage())
        settings = self._agents[agent]
        answer: Answer[T] = Answer(value=None, error=None)
        # The question as the judge is sent it, re-asks included (a judge without system messages loses none).
        asked = instructions_in_user(messages) if settings.system_role == "user" else list(messages)
        convo = list(asked)
        if reasks is None:
            reasks = settings.max_reasks
        cap = settings.token_cap
        budget = min(cap, max(settings.max_tokens, max_tokens or 0))
        rejected_as_recorded: str | None = None  # why today's rules re-ask an answer the replayed run used
        for round_ in range(reasks + 1):
            try:
                reply = await self._request(agent, step, context, convo, schema, budget, contract)
            except _Fatal as exc:
                usage.failures += 1
                answer.error = self.redact(str(exc))
                return answer
            except OfflineMiss:
                if rejected_as_recorded is None:
                    raise
                raise OfflineMiss(
                    f"--offline: step {step}, agent {agent} ({context or 'no context'}): the recorded run used the "
                    f"judge's answer, which amaris's answer rules now re-ask ({rejected_as_recorded}): the rules "
                    "changed since the run was recorded, and the record holds no answer to the re-ask; run without "
                    "--offline to ask the model again, or replay with the amaris version that recorded it") from None
            answer.prompt_tokens += reply.usage.prompt_tokens
            answer.completion_tokens += reply.usage.completion_tokens
            ending = (reply.finish_reason or "stop").lower()
            if ending in CUT_AT_TOKEN_LIMIT:
                # A cut reply is never repaired into an answer: ask again with room for the whole of it.
                self._remember(reply, accepted=False)
                at_cap = budget >= cap
                problem = f"the reply was cut at the token limit ({budget} tokens, finish_reason {reply.finish_reason!r})"
                rejected_as_recorded = problem if reply.source_accepted else None
                answer.error = f"invalid answer: {problem}" + (
                    f"; the budget is at agents.{agent}.max_tokens_cap ({cap})" if at_cap else "")
                if round_ < reasks:
                    usage.reasks += 1
                    if not at_cap:
                        budget = min(cap, budget * 2)
                        convo = list(asked)
                    else:
                        convo = [
                            *asked,
                            {"role": "assistant", "content": echoed(reply.text[:4000], messages)},
                            {"role": "user", "content": f"Your answer could not be used: {problem}.\n"
                             "Reply again with only the JSON object, keeping every reason to one short line."},
                        ]
                continue
            try:
                if ending not in FINISHED:  # stopped by a filter, an abort, an error: what it says may be cut short
                    raise ReplyError(f"the reply ended with finish_reason {one_line(repr(reply.finish_reason), 60)}, "
                                     "not as a finished answer")
                data = extract_json_object(reply.text)
                value = parse(data) if parse else schema.model_validate(data)
                if check:
                    check(value)
                answer.value = value
                answer.error = None
                self._remember(reply, accepted=True)
                return answer
            except (ReplyError, ValidationError, ValueError) as exc:
                self._remember(reply, accepted=False)
                problem = one_line(self.redact(_describe(exc)), 2000)
                answer.error = f"invalid answer: {problem}"
                rejected_as_recorded = one_line(problem, 300) if reply.source_accepted else None
                if round_ < reasks:
                    usage.reasks += 1
                    convo = [
                        *asked,
                        {"role": "assistant", "content": echoed(reply.text[:4000], messages)},
                        {"role": "user", "content": reask_text(echoed(problem, messages))},
                    ]
        usage.failures += 1
        return answer


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether `event` is set within `seconds` (waiting no longer)."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True


def _names_format(detail: str) -> bool:
    """Whether an error answer is about the requested response format (llama.cpp's server answers a json_schema
    response_format with HTTP 500 "Input should be 'text' or 'json_object'")."""
    text = detail.lower()
    return "response_format" in text or "json_schema" in text or ("json_object" in text and "'text'" in text)


def _status_detail(exc: Any) -> str:
    """What the endpoint said in an error answer: the OpenAI-style error message, else the SDK's text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return str(getattr(exc, "message", exc))


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err["loc"]) or "(answer)"
            parts.append(f"{loc}: {err['msg']}")
        return "; ".join(parts)
    return str(exc)


def instructions_in_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages for a judge whose chat template drops system messages (`system_role = "user"`): the system
    text opens the first user message, which keeps its data blocks as they were."""
    system = [str(m["content"]) for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    if not system:
        return list(messages)
    if not rest or rest[0]["role"] != "user":  # no user turn to open: the instructions are one of their own
        return [{"role": "user", "content": "\n\n".join(system)}, *rest]
    return [{"role": "user", "content": "\n\n".join([*system, str(rest[0]["content"])])}, *rest[1:]]
