"""A small client of `amaris serve` with the reference's three calls, each sync and async.

    client = AmarisClient("http://127.0.0.1:8780")
    answer = client.score(prompt, response, step=t, reference=ref)     # or: await client.score_async(...)
    answer.score                      # float, or None when the judge could not score it (answer.error)
    client.rollouts_complete(t)       # the step's rollouts are in: write them, evolve in the background
    client.rubric_updated(t)          # block until that evolution is done; its status

Errors (4xx/5xx) raise `ServeError` with the server's reason. The client never retries /score on its
own: a repeat of a rollout without an `id` is a new rollout (give ids if you retry).
Imports only httpx and pydantic, so it is cheap to load in a trainer's reward worker.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from amaris_cli.serve.api import CompleteResponse, Health, RubricStatus, ScoreResponse

M = TypeVar("M", bound=BaseModel)
DEFAULT_URL = "http://127.0.0.1:8780"


class ServeError(Exception):
    """The server answered with an error: its HTTP status and reason."""

    def __init__(self, status: int, error: str, details: list[str] | None = None) -> None:
        super().__init__(f"HTTP {status}: {error}")
        self.status = status
        self.error = error
        self.details = details or []


def score_body(prompt: Any, response: Any, *, step: int, reference: Any = None, id: str | int | None = None,
               instance_id: str | int | None = None, metadata: dict[str, Any] | None = None,
               **fields: Any) -> dict[str, Any]:
    """The /score body: the reference's fields, `metadata.current_step`, and any other rollout field."""
    body: dict[str, Any] = {"prompt": prompt, "response": response, **fields}
    for key, value in (("reference", reference), ("id", id), ("instance_id", instance_id)):
        if value is not None:
            body[key] = value
    body["metadata"] = {**(metadata or {}), "current_step": step}
    return body


def _answer(response: httpx.Response, model: type[M]) -> M:
    if response.status_code == 200:
        return model.model_validate_json(response.content)
    try:
        body = response.json()
        error, details = str(body.get("error", body)), list(body.get("details", []))
    except ValueError:
        error, details = response.text[:500] or response.reason_phrase, []
    raise ServeError(response.status_code, error, details)


class AmarisClient:
    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float | None = 3600.0) -> None:
        """`timeout`: seconds per request (a sync-mode score waits for the step's evolution)."""
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._sync: httpx.Client | None = None
        self._async: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None

    # --- plumbing --------------------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        if self._sync is None:
            self._sync = httpx.Client(base_url=self.base_url, timeout=self.timeout)
        return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:  # an AsyncClient belongs to one event loop
            self._async = (loop, httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout))
        return self._async[1]

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        if self._async is not None:
            await self._async[1].aclose()
            self._async = None

    def __enter__(self) -> AmarisClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _wait_request(step: int | None, timeout: float) -> dict[str, Any]:
        """The /rubric_status/wait query, and an HTTP timeout the server's own wait fits in."""
        params = {"timeout": timeout, **({"step": step} if step is not None else {})}
        return {"params": params, "timeout": httpx.Timeout(timeout + 30.0)}

    # --- the reference's calls ---------------------------------------------------------------------
    def score(self, prompt: Any, response: Any, *, step: int, reference: Any = None, id: str | int | None = None,
              instance_id: str | int | None = None, metadata: dict[str, Any] | None = None,
              **fields: Any) -> ScoreResponse:
        body = score_body(prompt, response, step=step, reference=reference, id=id, instance_id=instance_id,
                          metadata=metadata, **fields)
        return _answer(self._client().post("/score", json=body), ScoreResponse)

    async def score_async(self, prompt: Any, response: Any, *, step: int, reference: Any = None,
                          id: str | int | None = None, instance_id: str | int | None = None,
                          metadata: dict[str, Any] | None = None, **fields: Any) -> ScoreResponse:
        body = score_body(prompt, response, step=step, reference=reference, id=id, instance_id=instance_id,
                          metadata=metadata, **fields)
        return _answer(await self._aclient().post("/score", json=body), ScoreResponse)

    def rollouts_complete(self, step: int) -> CompleteResponse:
        return _answer(self._client().post("/complete", json={"step": step}), CompleteResponse)

    async def rollouts_complete_async(self, step: int) -> CompleteResponse:
        return _answer(await self._aclient().post("/complete", json={"step": step}), CompleteResponse)

    def rubric_updated(self, step: int | None = None, *, timeout: float = 600.0) -> RubricStatus:
        """Block until the evolution of `step` (default: the latest complete step) has ended, or
        `timeout` seconds (then `timed_out` is true)."""
        return _answer(self._client().get("/rubric_status/wait", **self._wait_request(step, timeout)), RubricStatus)

    async def rubric_updated_async(self, step: int | None = None, *, timeout: float = 600.0) -> RubricStatus:
        response = await self._aclient().get("/rubric_status/wait", **self._wait_request(step, timeout))
        return _answer(response, RubricStatus)

    def health(self) -> Health:
        return _answer(self._client().get("/health"), Health)

    async def health_async(self) -> Health:
        return _answer(await self._aclient().get("/health"), Health)
