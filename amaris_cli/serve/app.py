"""The ASGI application: routes, bodies, JSON answers and status codes. No logic of its own.

A plain ASGI callable served by uvicorn: nine routes with JSON bodies need no framework. Every answer
is JSON; every error an `ErrorResponse` with a status a client can branch on:

    400  the body is not JSON            409  the step or rollout conflicts with the run's state
    404  no such route or step           413  the body is over the size limit
    405  wrong method for the route      422  JSON that is not a valid request (the reason names the field)
    502  the judge endpoint refused (key, model, URL), or the evolution a sync answer needs failed
    503  the server is stopping, or a wait (for an evolution, a lock) ran out

A client that disconnects stops only its own wait: a rollout it sent is judged and journaled anyway,
and a repeat of it (same id) is answered from the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import parse_qs

import orjson
from pydantic import BaseModel

from amaris_cli.errors import AmarisError, ConfigError, InputError, InputErrors, RunLockedError, WaitTimeout
from amaris_cli.llm.client import OutageInterrupted
from amaris_cli.llm.endpoint import EndpointFatal
from amaris_cli.schedule import EvolutionFailed
from amaris_cli.serve.api import ErrorResponse, check_step
from amaris_cli.serve.core import ApiError, ScoreIntake, ServeCore
from amaris_cli.serve.hosts import foreign_host
from amaris_cli.serve.intake import (
    read_complete_request,
    read_discard_request,
    read_openrlhf_request,
    read_outage_request,
    read_score_request,
)
from amaris_cli.serve.openrlhf import OPENRLHF_PATH
from amaris_cli.terminal import one_line, terminal_safe

MAX_BODY = 64 << 20  # the rollout reader's line limit
MAX_WAIT_S = 86400.0
DEFAULT_WAIT_S = 600.0

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class _Disconnected(Exception):
    pass


def status_of(exc: BaseException) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, WaitTimeout | OutageInterrupted):
        return 503
    if isinstance(exc, RunLockedError | EvolutionFailed | ConfigError):
        return 409  # another writer, or a rubric version the run cannot give yet
    if isinstance(exc, InputError | InputErrors):
        return 422
    if isinstance(exc, EndpointFatal):
        return 502
    return 500


class ServeApp:
    def __init__(self, core: ServeCore) -> None:
        self.core = core
        self.routes: dict[str, dict[str, Callable[[Scope, bytes], Awaitable[BaseModel]]]] = {
            "/score": {"POST": self._score},
            "/validate": {"POST": self._validate},
            "/complete": {"POST": self._complete},
            "/rubric_status/wait": {"GET": self._wait},
            "/rubric_status": {"GET": self._status},
            "/discard": {"POST": self._discard},
            "/outage": {"POST": self._outage},
            OPENRLHF_PATH: {"POST": self._openrlhf},
            "/health": {"GET": self._health},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are not spoken here; uvicorn closes the connection
        try:
            answer, status = await self._handle(scope, receive), 200
        except _Disconnected:
            return
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON answer
            status = status_of(exc)
            if status == 500 and not isinstance(exc, AmarisError | OSError):
                # its message may carry a rollout's text: nothing raw for the terminal watching the server
                sys.stderr.write(terminal_safe(traceback.format_exc()))
            answer = _error_body(exc)
        await _send_json(send, status, answer, allow=self._allow(scope) if status == 405 else None)

    def _allow(self, scope: Scope) -> str:
        return ", ".join(sorted(self.routes.get(scope["path"], {})))

    async def _handle(self, scope: Scope, receive: Receive) -> BaseModel:
        path = scope["path"].rstrip("/") or "/"
        methods = self.routes.get(path)
        if methods is None:
            known = ", ".join(f"{method} {route}" for route, handlers in self.routes.items() for method in handlers)
            raise ApiError(404, f"no route {scope['method']} {scope['path']}; routes: {known}")
        handler = methods.get(scope["method"])
        if handler is None:
            raise ApiError(405, f"{scope['path']} takes {', '.join(sorted(methods))}, not {scope['method']}")
        headers = dict(scope.get("headers", []))
        if (host := foreign_host(self.core.options.host, headers.get(b"host"))) is not None:
            raise ApiError(403, f"a request for host {one_line(host, 200)!r} is refused: amaris serve bound to "
                                f"{self.core.options.host} answers requests addressed to 127.0.0.1, ::1 or localhost "
                                "(a web page reaches it under another name through DNS rebinding)")
        if b"origin" in headers:
            # A browser sends Origin with every cross-site request and every POST; trainers' HTTP clients never
            # do. Without this, any web page open beside the server could POST rollouts (a text/plain body is
            # sent without a CORS preflight), complete or discard steps of the training.
            raise ApiError(403, "requests from a web page (with an Origin header) are refused: amaris serve "
                                "takes requests from trainers' HTTP clients only")
        body = await _read_body(scope, receive, self.core.stopping)
        # The answer may take long (a sync score, a rubric wait): stop waiting when the client goes away.
        work = asyncio.ensure_future(handler(scope, body))
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                return work.result()
            work.cancel()
            with contextlib.suppress(BaseException):
                await work
            raise _Disconnected
        finally:
            gone.cancel()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    # --- routes ----------------------------------------------------------------------------------
    async def _score(self, scope: Scope, body: bytes) -> BaseModel:
        assert self.core.session is not None
        intake = read_score_request(body, self.core.session.settings.pipeline.instance_field)
        with _naming(intake):
            return await self.core.score(intake.step, intake.rollout, intake.explicit_id, intake.training)

    async def _validate(self, scope: Scope, body: bytes) -> BaseModel:
        assert self.core.session is not None
        intake = read_score_request(body, self.core.session.settings.pipeline.instance_field, "POST /validate")
        with _naming(intake):
            return await self.core.validate(intake.step, intake.rollout, intake.explicit_id)

    async def _complete(self, scope: Scope, body: bytes) -> BaseModel:
        request = read_complete_request(body)
        if request is None:  # the reference's: no body
            return await self.core.complete_open()
        return await self.core.complete(request.step, request.shard, request.shards)

    async def _discard(self, scope: Scope, body: bytes) -> BaseModel:
        request = read_discard_request(body)
        return await self.core.discard(request.step, opened_before=request.opened_before)

    async def _outage(self, scope: Scope, body: bytes) -> BaseModel:
        request = read_outage_request(body)
        return await self.core.outage(request.step, request.reason)

    async def _openrlhf(self, scope: Scope, body: bytes) -> BaseModel:
        assert self.core.session is not None
        intakes = read_openrlhf_request(body, self.core.session.settings.pipeline.instance_field)
        return await self.core.score_openrlhf(intakes, hashlib.sha256(body).hexdigest())

    async def _wait(self, scope: Scope, body: bytes) -> BaseModel:
        query = _query(scope)
        if not query:  # the reference's: no query
            return await self.core.wait_updated()
        timeout = _number(query, "timeout", DEFAULT_WAIT_S)
        if not 0 <= timeout <= MAX_WAIT_S:
            raise ApiError(422, f"timeout: must be from 0 to {MAX_WAIT_S:g} seconds, got {timeout:g}")
        return await self.core.wait_status(_step(query), timeout)

    async def _status(self, scope: Scope, body: bytes) -> BaseModel:
        return self.core.status(_step(_query(scope)))

    async def _health(self, scope: Scope, body: bytes) -> BaseModel:
        return self.core.health()


# --- plumbing --------------------------------------------------------------------------------------


async def _read_body(scope: Scope, receive: Receive, stopping: asyncio.Event) -> bytes:
    for name, value in scope.get("headers", []):
        if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY:
            raise ApiError(413, f"the body is {int(value)} bytes, over the {MAX_BODY}-byte limit")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await _receive_unless(receive, stopping)
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise ApiError(413, f"the body is over the {MAX_BODY}-byte limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _receive_unless(receive: Receive, stopping: asyncio.Event) -> dict[str, Any]:
    """The next message of the body, or a 503 once the server stops: a client that stalls mid-body would
    otherwise hold the shutdown for uvicorn's whole grace period."""
    message = asyncio.ensure_future(receive())
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({message, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        received = message.done()
        if not received:
            message.cancel()
    if not received:
        raise ApiError(503, "the server is stopping; send the request again once it is back")
    return message.result()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _query(scope: Scope) -> dict[str, str]:
    parsed = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    return {k: v[-1] for k, v in parsed.items()}


def _number(query: dict[str, str], key: str, default: float) -> float:
    if key not in query:
        return default
    try:
        return float(query[key])
    except ValueError:
        raise ApiError(422, f"{key}: expected a number of seconds, got {query[key]!r}") from None


def _step(query: dict[str, str]) -> int | None:
    if "step" not in query or query["step"] == "":
        return None
    try:
        return check_step(int(query["step"]))
    except ValueError:
        raise ApiError(422, f"step: expected an integer from 0, got {query['step']!r}") from None


@contextlib.contextmanager
def _naming(intake: ScoreIntake) -> Iterator[None]:
    """An error while a rollout is judged (the endpoint refused, a wait ran out) names the request's step and
    id, as the server's own refusals do: a client that sent many at once can tell which one failed."""
    try:
        yield
    except ApiError:
        raise
    except AmarisError as exc:
        raise ApiError(status_of(exc), str(exc), step=intake.step, rollout_id=intake.rollout.id) from exc


def _error_body(exc: BaseException) -> ErrorResponse:
    if isinstance(exc, ApiError):
        return ErrorResponse(error=str(exc), details=exc.details, step=exc.step, id=exc.rollout_id)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return ErrorResponse(error=f"{where}{exc.strerror or exc}")
    if isinstance(exc, AmarisError):
        return ErrorResponse(error=str(exc))
    return ErrorResponse(error=f"internal error: {type(exc).__name__}: {one_line(str(exc), 300)}")


async def _send_json(send: Send, status: int, body: BaseModel, allow: str | None = None) -> None:
    data = orjson.dumps(body.model_dump(mode="json")) + b"\n"
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if allow:
        headers.append((b"allow", allow.encode()))
    with contextlib.suppress(OSError, RuntimeError):  # the client is gone: nothing to tell it
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})
