"""A small asyncio HTTP/1.1 server speaking the OpenAI chat-completions protocol.

Endpoints: POST /v1/chat/completions (JSON mode and json_schema accepted, `usage` returned,
OpenAI-shaped error bodies), POST /v1/embeddings (hashed bag-of-words vectors), GET /v1/models,
GET /_stats (request and fault counters, for tests and benchmarks).

Faults are injected deterministically: a `fault_plan` applies to the first requests in order,
then each request draws from `fault_rate` with a seeded generator indexed by the request's
sequence number, so a run with the same settings sees the same faults. Transient kinds (the
default mix of `fault_rate`, FAULT_KINDS): 429 (with Retry-After), 500, 503, reset (connection
dropped), hang (no answer until the client times out), malformed (a body that is not JSON),
truncated (cut-off JSON content), wrong_shape (valid JSON of the wrong shape), empty_choices.

Answers a real judge gives that do not mean what a naive reader takes (REPLY_KINDS): scale10 (every
score on a 0-10 scale: 9 met, 1 not met, 5 half), two_objects (the verdict, then "if the rubric were lenient: {...}"),
retracted (the verdict, then "Actually, I made a mistake: ..." in prose; retracted_zh and retracted_de the same
in Chinese and German, as a judge answers rollouts in those languages), length
(cut at `"score": 0.` with finish_reason "length"; max_tokens the same with "MAX_TOKENS"), content_filter (the
whole verdict, then "Actu" with finish_reason "content_filter"), unclosed_think (`<think>` and a draft, never
closed), echo_auth (the request's Authorization header copied into every reason).

Broken bodies and endpoints (WIRE_KINDS, ENDPOINT_KINDS): drip (the body one byte every
`drip_interval` seconds), bad_usage (`usage.prompt_tokens = "many"`), choices_object, choices_number,
content_not_string; 401, 403, 404, quota (429 insufficient_quota, as OpenAI answers an account out of credit), redirect (302 to a login page), html (a 200 HTML page),
event_stream (a 200 text/event-stream); 400 (this request refused: context too long). Of proxies and
providers (PROXY_KINDS): 529 (overloaded), error_body (a 200 whose body is an error object). With `enforce_max_tokens`, a reply longer than the request's
token limit is cut there with finish_reason "length", as a real server does.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import re
import threading
import time
import urllib.parse
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import orjson

from amaris_cli import eventloop
from amaris_cli.simjudge import rules
from amaris_cli.simjudge.faults import (  # noqa: F401 (defined there, once; imported from here too)
    ALL_FAULT_KINDS,
    ENDPOINT_KINDS,
    FAULT_KINDS,
    REPLY_KINDS,
    REQUEST_KINDS,
    WIRE_KINDS,
)

# What a `retracted*` reply adds after its verdict: the judge taking it back in prose.
RETRACTIONS = {
    "retracted": "Actually, I made a mistake above: the first criterion is not met after all.",
    "retracted_zh": "等等，我犯了一个错误：第一个标准其实没有满足。",
    "retracted_de": "Eigentlich habe ich mich geirrt: das erste Kriterium ist doch nicht erfüllt.",
}


@dataclass
class SimJudgeConfig:
    latency: float = 0.0
    fault_rate: float = 0.0
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    fault_plan: list[str] = field(default_factory=list)
    agent_faults: dict[str, str] = field(default_factory=dict)  # agent -> kind, on every request
    # agent -> share of its questions that always get a `wrong_shape` answer (re-asks included): chosen by
    # a hash of the question's first user message, so the same rollouts fail whatever the request order
    agent_fault_rate: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    retry_after: float | str | None = 0.05  # a 429's Retry-After: seconds, the header's text as sent, or None: none
    retry_after_header: str = "Retry-After"  # or "Retry-After-Ms" (OpenAI's, in milliseconds)
    hang_seconds: float = 600.0
    scripted: dict[str, list[str]] = field(default_factory=dict)  # agent -> raw contents, used first
    drip_interval: float = 0.2  # seconds between the bytes of a `drip` body
    enforce_max_tokens: bool = False  # cut replies longer than the request's token limit, as servers do
    error_detail: str = ""  # appended to injected error messages (a hostile endpoint's text)
    # response_format types answered as llama.cpp's server answers json_schema: HTTP 500, "Input should be ..."
    rejected_formats: tuple[str, ...] = ()
    # The model never sees system messages, as under a chat template without a system turn (llama.cpp's Gemma format)
    drop_system_messages: bool = False
    # A gateway that takes its key as query parameters (`?key=...`): a request without these answers 401.
    required_query: dict[str, str] = field(default_factory=dict)
    # An unreliable judge, for tests of amaris's reliability check. `inconsistent`: criterion id ("*": every
    # criterion) -> the probability that the scorer answers the other way on it (a score of 0.5 or more becomes 0,
    # a lower one 1; a pitfall present becomes absent and back), drawn from a hash of `seed`, the criterion, the response's number and the
    # request's messages: the same request always gets the same answer (replays hold), a distinct request (a
    # re-judgement) draws again. `first_listed_met`: position bias, the criterion the rubric lists first is
    # always judged met (or, a pitfall, absent), whatever the response.
    inconsistent: dict[str, float] = field(default_factory=dict)
    first_listed_met: bool = False


class SimJudge:
    def __init__(self, config: SimJudgeConfig | None = None) -> None:
        self.config = config or SimJudgeConfig()
        self.stats: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []  # bodies of chat requests, for tests
        self.arrivals: list[float] = []  # time.monotonic() of each chat request, for rate-limit tests
        self.keep_requests = False
        self._seq = 0
        self._plan = deque(self.config.fault_plan)
        self._scripted = {k: deque(v) for k, v in self.config.scripted.items()}
        self._server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.host = "127.0.0.1"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # --- lifecycle ------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._server = await asyncio.start_server(self._handle, host, port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def serve_forever(self) -> None:
        assert self._server is not None
        async with self._server:
            await self._server.serve_forever()

    def start_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> SimJudge:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = (eventloop.loop_factory() or asyncio.new_event_loop)()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start(host, port))
                ready.set()
                loop.run_forever()
            finally:
                # Closed here, once stopped: asyncio's loop closed itself when collected, uvloop's never does (its
                # sockets and descriptors stayed open, six a judge). The connections' tasks finish their cancel.
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                asyncio.set_event_loop(None)
                loop.close()

        self._thread = threading.Thread(target=run, name="sim-judge", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("sim-judge did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        loop = self._loop

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            for task in [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]:
                task.cancel()

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = None

    def __enter__(self) -> SimJudge:
        return self.start_in_thread()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP -------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    break
                method, path, _ = (request_line.decode("latin-1").split(" ", 2) + ["", ""])[:3]
                headers: dict[str, str] = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    key, _, value = line.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                route, _, query = path.partition("?")
                if not self._query_allowed(query):
                    self._write(writer, 401, self._error("invalid_request_error", "the gateway's key parameter is missing"))
                    await writer.drain()
                    continue
                keep = await self._route(method, route, body, writer, headers)
                if not keep or headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the peer may be gone
                pass

    def _query_allowed(self, query: str) -> bool:
        given = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        return all(given.get(name) == value for name, value in self.config.required_query.items())

    @staticmethod
    def _write(writer: asyncio.StreamWriter, status: int, payload: bytes, extra: dict[str, str] | None = None,
               content_type: str = "application/json") -> None:
        reason = {200: "OK", 302: "Found", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
                  404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
                  503: "Service Unavailable"}.get(status, "Error")
        head = [f"HTTP/1.1 {status} {reason}", f"content-type: {content_type}",
                f"content-length: {len(payload)}", "connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)

    @staticmethod
    def _error(kind: str, message: str, code: str | None = None) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})

    async def _route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter,
                     headers: dict[str, str] | None = None) -> bool:
        if method == "GET" and path == "/_stats":
            self._write(writer, 200, orjson.dumps(dict(self.stats)))
        elif method == "GET" and path in ("/v1/models", "/models"):
            self._write(writer, 200, orjson.dumps({"object": "list", "data": [{"id": "sim-judge", "object": "model", "owned_by": "amaris"}]}))
        elif method == "POST" and path in ("/v1/chat/completions", "/chat/completions"):
            return await self._chat(body, writer, headers or {})
        elif method == "POST" and path in ("/v1/embeddings", "/embeddings"):
            self._embeddings(body, writer)
        else:
            self._write(writer, 404, self._error("invalid_request_error", f"no route {method} {path}"))
        await writer.drain()
        return True

    def _next_fault(self, agent: str | None, messages: list[dict[str, Any]] | None = None) -> str | None:
        self._seq += 1
        if agent and agent in self.config.agent_faults:
            return self.config.agent_faults[agent]
        if agent and agent in self.config.agent_fault_rate and messages:
            first = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
            draw = int(hashlib.sha256(f"{self.config.seed}:{first}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
            if draw < self.config.agent_fault_rate[agent]:
                return "wrong_shape"
        if self._plan:
            fault = self._plan.popleft()
            return fault or None
        if self.config.fault_rate > 0:
            rng = random.Random(self.config.seed * 1_000_003 + self._seq)
            if rng.random() < self.config.fault_rate:
                return rng.choice(self.config.fault_kinds)
        return None

    async def _chat(self, body: bytes, writer: asyncio.StreamWriter, headers: dict[str, str]) -> bool:
        self.stats["requests"] += 1
        self.arrivals.append(time.monotonic())
        try:
            request = orjson.loads(body)
            messages = request["messages"]
            if self.config.drop_system_messages:  # as a chat template without a system turn (llama.cpp's Gemma)
                messages = [m for m in messages if m.get("role") != "system"]
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            self._write(writer, 400, self._error("invalid_request_error", "body must be JSON with messages"))
            await writer.drain()
            return True
        if self.keep_requests:
            self.requests.append(request)
        rf = request.get("response_format") or {}
        if rf and rf.get("type") not in ("json_object", "json_schema", "text"):
            self._write(writer, 400, self._error("invalid_request_error", f"unsupported response_format {rf.get('type')!r}"))
            await writer.drain()
            return True
        if rf and rf.get("type") in self.config.rejected_formats:
            self.stats["rejected_format"] += 1
            self._write(writer, 500, self._error("server_error", "1 validation error for CreateChatCompletionRequest\n"
                                                 "response_format.type\n  Input should be 'text' or 'json_object'"))
            await writer.drain()
            return True
        try:
            agent, answer = rules.answer(messages)
        except Exception as exc:  # noqa: BLE001 - a rule bug must answer 500, not drop the connection
            self.stats["rule_errors"] += 1
            self._write(writer, 500, self._error("server_error", f"sim-judge rule error: {type(exc).__name__}: {exc}"))
            await writer.drain()
            return True
        self.stats[f"agent:{agent}"] += 1
        if agent in ("scorer", "group_scorer") and answer is not None:
            answer = self._unreliable(answer, messages)
        if self.config.latency:
            await asyncio.sleep(self.config.latency)
        fault = self._next_fault(agent, messages)
        if fault:
            self.stats[f"fault:{fault}"] += 1
        if fault in ("429", "500", "503", "529"):
            status = int(fault)
            after = self.config.retry_after
            extra = ({self.config.retry_after_header: after if isinstance(after, str) else f"{after:g}"}
                     if status == 429 and after is not None else None)
            kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "server_error")
            self._write(writer, status, self._error(kind, f"sim-judge injected HTTP {status}{self.config.error_detail}"), extra)
            await writer.drain()
            return True
        if fault == "reset":
            writer.transport.abort()
            return False
        if fault == "hang":
            await asyncio.sleep(self.config.hang_seconds)
            return False
        if fault == "error_body":  # as LiteLLM and OpenRouter-style proxies pass an upstream failure on
            self._write(writer, 200, self._error("server_error", "upstream provider unavailable"))
            await writer.drain()
            return True
        if fault == "malformed":
            self._write(writer, 200, b"<html>upstream proxy error</html>", content_type="application/json")
            await writer.drain()
            return True
        if fault == "400":
            message = f"This model's maximum context length is 8192 tokens{self.config.error_detail}"
            self._write(writer, 400, self._error("invalid_request_error", message, "context_length_exceeded"))
            await writer.drain()
            return True
        if fault in ENDPOINT_KINDS:
            self._endpoint_fault(fault, writer)
            await writer.drain()
            return True

        scripted = self._scripted.get(agent or "")
        finish_reason = "stop"
        if scripted:
            content = scripted.popleft()
        elif answer is None:
            content = "I cannot tell which amaris agent this prompt is for."
        else:
            content = self._reply(fault, answer, headers)
            if fault in ("length", "max_tokens"):  # OpenAI's name, and the one Gemini's gateways give
                content, finish_reason = _cut_at_a_score(content), "length" if fault == "length" else "MAX_TOKENS"
            elif fault == "content_filter":  # the whole verdict, then a take-back the filter stopped
                content, finish_reason = content + "\n\nActu", "content_filter"
        if fault == "truncated":
            content = content[: max(1, len(content) // 2)]
        elif fault == "wrong_shape":
            content = orjson.dumps({"result": "ok", "items": [1, 2, 3]}).decode()
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        if self.config.enforce_max_tokens and isinstance(limit, int) and len(content) // 4 + 1 > limit:
            content, finish_reason = content[: max(0, limit - 1) * 4], "length"
        prompt_tokens = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 1
        completion_tokens = len(content) // 4 + 1
        self.stats["prompt_tokens"] += prompt_tokens
        self.stats["completion_tokens"] += completion_tokens
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        choices: Any = [] if fault == "empty_choices" else [choice]
        usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                 "total_tokens": prompt_tokens + completion_tokens}
        if fault == "bad_usage":
            usage["prompt_tokens"] = "many"
        elif fault == "choices_object":
            choices = {"0": choice}
        elif fault == "choices_number":
            choices = 1
        elif fault == "content_not_string":
            choice["message"]["content"] = [{"type": "text", "text": content}]
        payload = {
            "id": f"chatcmpl-sim{self._seq}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "sim-judge"),
            "choices": choices,
            "usage": usage,
        }
        if fault == "drip":
            return await self._drip(writer, orjson.dumps(payload))
        self._write(writer, 200, orjson.dumps(payload))
        await writer.drain()
        return True

    def _unreliable(self, answer: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The scorer's answer as the configured unreliable judge gives it (`inconsistent`, `first_listed_met`)."""
        if not self.config.inconsistent and not self.config.first_listed_met:
            return answer
        rubric = rules._json_after(rules.instructions(messages), "The rubric (JSON)") or [{}]
        first_id = rubric[0].get("id")
        request = orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)

        def verdicts(rows: list[dict[str, Any]], number: int) -> list[dict[str, Any]]:
            out = []
            for row in rows:
                row = dict(row)
                key = "present" if "present" in row else "score"
                cid = row["criterion_id"]
                if self.config.first_listed_met and cid == first_id:
                    row[key] = False if key == "present" else 1.0
                    row["reason"] = "listed first"
                rate = self.config.inconsistent.get(cid, self.config.inconsistent.get("*", 0.0))
                digest = hashlib.sha256(f"{self.config.seed}:{cid}:{number}:".encode() + request).digest()
                if rate and int.from_bytes(digest[:8], "big") / 2**64 < rate:
                    row[key] = (not row[key]) if key == "present" else (0.0 if row[key] >= 0.5 else 1.0)
                    row["reason"] = f"{row['reason']} (answered the other way)"
                out.append(row)
            return out

        if "responses" in answer:
            return {"responses": [{**e, "verdicts": verdicts(e["verdicts"], e["response"])} for e in answer["responses"]]}
        return {"verdicts": verdicts(answer["verdicts"], 0)}

    @staticmethod
    def _reply(fault: str | None, answer: Any, headers: dict[str, str]) -> str:
        """The reply text for an answer, as a judge in the given reply mode writes it."""
        if fault == "scale10":
            # a 0-10 judge seen in the wild: "met" is 9, "not met" 1, half met 5
            return orjson.dumps(_map_scores(answer, lambda score: round(1 + 8 * score, 6))).decode()
        if fault == "echo_auth":
            echoed = f" (request header Authorization: {headers.get('authorization', '')})"
            return orjson.dumps(_map_reasons(answer, lambda reason: reason + echoed)).decode()
        content = orjson.dumps(answer).decode()
        if fault == "two_objects":
            lenient = orjson.dumps(_map_scores(answer, lambda _score: 1.0)).decode()
            if lenient == content:  # an agent whose answer holds no score: the second object differs in prose
                lenient = orjson.dumps(_reword_first_prose(answer)).decode()
            return f"{content}\n\nIf the rubric were lenient, the verdict would be:\n{lenient}"
        if fault in RETRACTIONS:
            return f"{content}\n\n{RETRACTIONS[fault]}"
        if fault == "unclosed_think":
            return f"<think>Let me draft the verdict first.\n{content}\nNow let me check each criterion again"
        return content

    def _endpoint_fault(self, fault: str, writer: asyncio.StreamWriter) -> None:
        detail = self.config.error_detail
        if fault == "401":
            self._write(writer, 401, self._error("invalid_request_error", f"Incorrect API key provided{detail}", "invalid_api_key"))
        elif fault == "403":
            self._write(writer, 403, self._error("permission_error", f"You are not allowed to use this model{detail}"))
        elif fault == "404":
            self._write(writer, 404, self._error("invalid_request_error", f"The model does not exist{detail}", "model_not_found"))
        elif fault == "quota":
            self._write(writer, 429, self._error("insufficient_quota", "You exceeded your current quota, please check "
                                                 f"your plan and billing details.{detail}", "insufficient_quota"))
        elif fault == "redirect":
            self._write(writer, 302, b"", {"location": f"http://{self.host}:{self.port}/login"})
        elif fault == "html":
            page = b"<!doctype html><html><head><title>Sign in</title></head><body>Please sign in</body></html>"
            self._write(writer, 200, page, content_type="text/html; charset=utf-8")
        elif fault == "event_stream":
            stream = b'data: {"choices": [{"delta": {"content": "{}"}}]}\n\ndata: [DONE]\n\n'
            self._write(writer, 200, stream, content_type="text/event-stream")

    async def _drip(self, writer: asyncio.StreamWriter, payload: bytes) -> bool:
        """A 200 whose body arrives one byte every `drip_interval` seconds."""
        head = ["HTTP/1.1 200 OK", "content-type: application/json", f"content-length: {len(payload)}",
                "connection: close"]
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
            await writer.drain()
            for i in range(len(payload)):
                writer.write(payload[i : i + 1])
                await writer.drain()
                await asyncio.sleep(self.config.drip_interval)
        except (ConnectionError, RuntimeError):
            pass  # the client gave up
        return False

    def _embeddings(self, body: bytes, writer: asyncio.StreamWriter) -> None:
        self.stats["embedding_requests"] += 1
        request = orjson.loads(body)
        inputs = request.get("input", [])
        inputs = [inputs] if isinstance(inputs, str) else inputs
        data = [{"object": "embedding", "index": i, "embedding": hashed_embedding(t)} for i, t in enumerate(inputs)]
        self._write(writer, 200, orjson.dumps({"object": "list", "data": data, "model": request.get("model"),
                                               "usage": {"prompt_tokens": 0, "total_tokens": 0}}))


def hashed_embedding(text: str, dims: int = 128) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words are close."""
    vec = [0.0] * dims
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big")
        vec[h % dims] += 1.0 if (h >> 16) & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def _map_scores(answer: Any, fn: Any) -> Any:
    """The answer with fn applied to every verdict score (scorer and group-scorer answers)."""
    if isinstance(answer, dict):
        return {k: (fn(v) if k == "score" and isinstance(v, int | float) and not isinstance(v, bool)
                    else _map_scores(v, fn)) for k, v in answer.items()}
    if isinstance(answer, list):
        return [_map_scores(v, fn) for v in answer]
    return answer


def _reword_first_prose(answer: Any) -> Any:
    """The answer with its first long string (a rationale, an assessment) put another way."""
    done = False

    def walk(value: Any) -> Any:
        nonlocal done
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and len(value) > 20 and not done:
            done = True
            return f"Leniently: {value}"
        return value

    return walk(answer)


def _map_reasons(answer: Any, fn: Any) -> Any:
    if isinstance(answer, dict):
        return {k: (fn(v) if k == "reason" and isinstance(v, str) else _map_reasons(v, fn)) for k, v in answer.items()}
    if isinstance(answer, list):
        return [_map_reasons(v, fn) for v in answer]
    return answer


def _cut_at_a_score(content: str) -> str:
    """The reply cut just after the first digit and point of a score (`"score": 0.`), else halved."""
    m = re.search(r'"score":\s*\d\.', content)
    return content[: m.end()] if m else content[: max(1, len(content) // 2)]
