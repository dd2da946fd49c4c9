"""The chat-completion wire: sending a request body through the openai SDK, and reading the answer.

Sending (`ChatPoster`): a request is serialized once (orjson) and POSTed through the AsyncOpenAI
client's lower-level request method, `client.post("/chat/completions", cast_to=<HTTP Response>)`,
the openai README's way to call an endpoint below the typed resources. That keeps what the SDK
does for every request (base URL, the `Authorization` header and its other headers, per-request
timeouts, its HTTP client and connection pool, its error classes: APIStatusError with the parsed
error body, APITimeoutError, APIConnectionError) and skips what amaris does not use: the recursive
transform of the typed parameters and the response model (amaris reads the body itself, below).
Those two were most of the SDK's CPU per call (bench/README.md, case 1).

A 200 answer is not necessarily a completion: proxies and half-compatible servers send
`usage.prompt_tokens = "many"`, `choices` as an object or a number, `content` as a list, or an
error object with status 200. Each is a malformed body (`WireError`), which the client retries
like any transient fault. Only the shape of the body is checked here, so that an error in
amaris's own code is never mistaken for (and retried as) a bad answer.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from amaris_cli.llm.endpoint import url_secrets
from amaris_cli.terminal import one_line


class WireError(Exception):
    def __init__(self, message: str, kind: str = "malformed_body") -> None:
        super().__init__(message)
        self.kind = kind


class _Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    content: StrictStr | None = None
    refusal: StrictStr | None = None


class _Choice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    message: _Message
    finish_reason: StrictStr | None = None


class _Usage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)


class _Completion(BaseModel):
    model_config = ConfigDict(extra="ignore")
    choices: list[_Choice]
    usage: _Usage | None = None


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


def read_completion(body: bytes) -> Completion:
    """The first choice's text, finish reason and token usage, or a WireError saying what is wrong."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise WireError(f"malformed response body (not JSON): {one_line(body[:120].decode('utf-8', 'replace'))!r}") from None
    if not isinstance(data, dict):
        raise WireError(f"malformed response body: a JSON {type(data).__name__}, not an object")
    if "choices" not in data and isinstance(data.get("error"), dict | str):
        error = data["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise WireError(f"the endpoint answered 200 with an error: {one_line(str(message), 300)}", "error_body")
    try:
        completion = _Completion.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in exc.errors()[:3])
        raise WireError(f"malformed response body: {problems}") from None
    if not completion.choices:
        raise WireError("the response had no choices", "empty_choices")
    if len({(c.message.content, c.message.refusal) for c in completion.choices}) > 1:
        # One was asked for (n is never sent): which of two different answers the judge meant cannot be told.
        raise WireError(f"the response had {len(completion.choices)} different choices where one was asked for")
    choice = completion.choices[0]
    if choice.message.content is None:
        refusal = f" (refusal: {one_line(choice.message.refusal, 200)})" if choice.message.refusal else ""
        raise WireError(f"the response had no message content{refusal}", "empty_content")
    usage = completion.usage or _Usage()
    return Completion(text=choice.message.content, finish_reason=choice.finish_reason,
                      prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0)


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def preload_sdk() -> None:
    """Start importing the openai SDK in the preload thread (amaris_cli/preload.py).

    `import openai` is most of a command's start-up (0.8-1.3 s on a 2-core machine; its package imports
    every API type). In a background thread it overlaps with whatever the command waits for before its
    first request: a pipe the trainer is still writing the rollouts into, an evolution that writes the
    rubric version it needs, the score of its step. The first request then finds the module loaded, or
    waits for the rest of the import. Call it after the command has imported its own modules: two
    threads importing the same modules at the same time could meet in a circular import.
    Like every preload, it runs without the cyclic garbage collector (preload.py)."""
    import sys

    from amaris_cli import preload

    if "openai" in sys.modules:
        return

    def load() -> None:
        try:
            import openai  # noqa: F401
        except Exception:  # noqa: BLE001 - the first request imports it again and reports the error
            pass

    preload.ahead(load)


def skip_final_collection() -> None:
    """At exit, leave the objects that exist now out of the interpreter's final garbage collection.

    Once the SDK is loaded, finalizing the interpreter takes 0.2 s, most of it the last collection
    walking the SDK's thousands of type objects. That is on a trainer's critical path after `score`
    has written the rewards. Freezing them at exit (atexit handlers run before that collection) skips
    the walk; every atexit handler, file flush and thread join still happens as usual."""
    import atexit
    import gc

    atexit.unregister(gc.freeze)  # once, however many commands a process runs (the tests run many)
    atexit.register(gc.freeze)


def http_client(environ: Any, base_url: str | None) -> Any:
    """The SDK's HTTP client for one endpoint, with redirects off (a redirect of a POST is a misconfigured
    base URL: it is reported, not followed).

    The SDK's aiohttp transport (`DefaultAioHttpClient`, the `openai[aiohttp]` extra) when aiohttp is
    installed: its C HTTP parser costs about half the CPU per call of the default httpx transport
    (bench/README.md, case 1). Not for a base URL with credentials (aiohttp refuses them beside the
    SDK's Authorization header; httpx sends them as Basic auth, which a proxy in front of the endpoint
    expects). AMARIS_HTTP_CLIENT=httpx keeps the default transport.

    A plain-http endpoint reached without a proxy never does TLS, so it gets a TLS context without the
    system's CA certificates, which take 0.15 s to load (a fifth of a command's start-up): verification
    stays on, so if TLS were ever attempted it would fail, never go unverified."""
    import ssl

    import openai  # the caller (LLMClient._client) has waited for the preload thread's import

    kwargs: dict[str, Any] = {"follow_redirects": False}
    if (base_url or "").lower().startswith("http://") and not any(
            os.environ.get(v) or os.environ.get(v.upper()) for v in PROXY_VARIABLES):
        kwargs["verify"] = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    aiohttp_client = getattr(openai, "DefaultAioHttpClient", None)  # openai >= 1.83
    if (aiohttp_client is not None and not url_secrets(base_url)
            and environ.get("AMARIS_HTTP_CLIENT", "").lower() != "httpx"):
        try:
            return aiohttp_client(**kwargs)
        except RuntimeError:  # aiohttp is not installed
            pass
    return openai.DefaultAsyncHttpxClient(**kwargs)


def dropped_connection(exc: BaseException) -> str | None:
    """What dropped the connection, when the SDK reports it as a timeout: its aiohttp transport maps every
    aiohttp connection error (a server that closed the connection included) to a connect timeout. The
    first cause in the chain says which it was."""
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    if type(cause).__module__.partition(".")[0] == "aiohttp" and not isinstance(cause, TimeoutError):
        return str(cause) or type(cause).__name__
    return None


def unparsable_answer(exc: BaseException) -> str | None:
    """What was wrong with an answer the SDK's aiohttp transport could not parse (a bad status line, an
    invalid chunk size or header, two Content-Lengths, a header line over aiohttp's 8190 bytes): that
    transport maps aiohttp's connection and payload errors to the SDK's, but lets its ClientResponseError
    through unmapped, where httpx reports the same answer as a dropped connection. aiohttp is also the
    stricter reader (header lines up to 8190 bytes, at most 128 headers, where httpx takes 100 kB of
    headers), so the reason names the other transport."""
    import sys

    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None or not isinstance(exc, aiohttp.ClientError):
        return None
    message = one_line(str(getattr(exc, "message", None) or exc or type(exc).__name__), 160)
    return f"aiohttp cannot read the answer as HTTP (httpx, AMARIS_HTTP_CLIENT=httpx, takes longer and more headers): {message}"


def _response_class(http_client: Any) -> type:
    """The Response class of the HTTP library under the SDK (httpx; httpx2 in openai >= 3): passed as
    `cast_to`, it makes `client.post` return the HTTP response itself."""
    import sys

    for cls in type(http_client).__mro__:
        package = cls.__module__.partition(".")[0]
        if package in ("httpx", "httpx2"):
            return sys.modules[package].Response  # type: ignore[no-any-return]
    raise TypeError(f"not an httpx client: {type(http_client).__name__}")


class ChatPoster:
    """POST /chat/completions of one AsyncOpenAI client with a prepared body; returns the HTTP response
    (status errors raised by the SDK as usual)."""

    path = "/chat/completions"

    def __init__(self, client: Any, http_client: Any, query: str = "") -> None:
        """`query`: the base URL's query (endpoint.query_apart), sent as given after the path."""
        self.client = client
        self.response_class = _response_class(http_client)
        # `content=` (raw bytes) exists since openai 2.16; before, the payload goes as `body=` (JSON-encoded by the SDK).
        self.raw_bodies = "content" in inspect.signature(client.post).parameters
        # The URL the SDK joins from its base URL and the path for every request, joined once by the SDK's own
        # method: an absolute URL is taken as it is, which saves parsing and rebuilding it per call (~8% of the
        # SDK's CPU per call).
        prepare = getattr(client, "_prepare_url", None)
        self.url = (str(prepare(self.path)) if prepare is not None else self.path) + (f"?{query}" if query else "")

    async def post(self, body: bytes, payload: dict[str, Any], timeout: float) -> Any:
        if self.raw_bodies:
            return await self.client.post(self.url, cast_to=self.response_class, content=body,
                                          options={"timeout": timeout})
        return await self.client.post(self.url, cast_to=self.response_class, body=payload,
                                      options={"timeout": timeout})

    async def close(self) -> None:
        await self.client.close()
