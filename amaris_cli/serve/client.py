"""Clients of `amaris serve`.

`RewardClient` is the reference's client (../shared/REFERENCE_API.md), with its names and request
bodies exactly, so a program written for the reference runs by changing its import:

    async with RewardClient("http://127.0.0.1:8780", timeout=600) as client:
        reward = await client.score_async(rollout={"id": ..., "input": ..., "output": ...},
                                          metadata={"current_step": t, "high_level_goal": ..., ...})
        await client.rollouts_complete_async()       # POST /complete, no body
        await client.rubric_updated_async()          # GET /rubric_status/wait, no query

`AmarisClient` speaks amaris's own shapes (steps named in every call, answers as models):

    client = AmarisClient("http://127.0.0.1:8780")
    answer = client.score(prompt, response, step=t, reference=ref)     # step=None: the server's open step
    answer.score                      # float, or None when the judge could not score it (answer.error)
    client.rollouts_complete(t)       # the step's rollouts are in: write them, evolve in the background
    client.rubric_updated(t)          # block until that evolution is done; its status

Errors (4xx/5xx) raise `ServeError` with the server's reason. The client never retries /score on its
own: a repeat of a rollout without an `id` is a new rollout (give ids if you retry).
Imports only httpx and pydantic, so it is cheap to load in a trainer's reward worker.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from amaris_cli.serve.api import CompleteResponse, DiscardResponse, Health, RubricStatus, ScoreResponse

M = TypeVar("M", bound=BaseModel)
DEFAULT_URL = "http://127.0.0.1:8780"


class ScoreFailed(RuntimeError):
    """The judge could not score the rollout: the server answered no reward, and none is made up."""


class ServeError(Exception):
    """The server answered with an error: its HTTP status and reason."""

    def __init__(self, status: int, error: str, details: list[str] | None = None) -> None:
        super().__init__(f"HTTP {status}: {error}")
        self.status = status
        self.error = error
        self.details = details or []


def score_body(prompt: Any, response: Any, *, step: int | None, reference: Any = None, id: str | int | None = None,
               instance_id: str | int | None = None, metadata: dict[str, Any] | None = None,
               **fields: Any) -> dict[str, Any]:
    """The /score body in amaris's shape: the rollout's fields, `metadata.current_step` (none: the rollout
    joins the server's open step), and any other rollout field."""
    body: dict[str, Any] = {"prompt": prompt, "response": response, **fields}
    for key, value in (("reference", reference), ("id", id), ("instance_id", instance_id)):
        if value is not None:
            body[key] = value
    body["metadata"] = {**(metadata or {}), **({"current_step": step} if step is not None else {})}
    return body


def complete_body(step: int, shard: int = 0, shards: int = 1) -> dict[str, Any]:
    """The /complete body: the step, and for one process of several its shard and their number."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} of {shards}: a shard is a process rank from 0 to shards-1")
    return {"step": step, **({"shard": shard, "shards": shards} if shards > 1 else {})}


def _error(response: httpx.Response) -> ServeError:
    try:
        body = response.json()
        error, details = str(body.get("error", body)), list(body.get("details", []))
    except (ValueError, AttributeError):
        error, details = response.text[:500] or response.reason_phrase, []
    return ServeError(response.status_code, error, details)


def _answer(response: httpx.Response, model: type[M]) -> M:
    if response.status_code == 200:
        return model.model_validate_json(response.content)
    raise _error(response)


class AmarisClient:
    def __init__(self, base_url: str = DEFAULT_URL, *, timeout: float | None = 3600.0) -> None:
        """`timeout`: seconds per request (a sync-mode score waits for the step's evolution)."""
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._sync: httpx.Client | None = None
        self._async: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None
        self._pid = os.getpid()

    # --- plumbing --------------------------------------------------------------------------------
    def _forked(self) -> None:
        """A forked child (verl's prime manager scores in a process pool) must not share the parent's
        connections: it opens its own."""
        if self._pid != os.getpid():
            self._pid, self._sync, self._async = os.getpid(), None, None

    def _client(self) -> httpx.Client:
        self._forked()
        if self._sync is None:
            self._sync = httpx.Client(base_url=self.base_url, timeout=self.timeout)
        return self._sync

    def _aclient(self) -> httpx.AsyncClient:
        self._forked()
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
    def score(self, prompt: Any, response: Any, *, step: int | None, reference: Any = None, id: str | int | None = None,
              instance_id: str | int | None = None, metadata: dict[str, Any] | None = None,
              **fields: Any) -> ScoreResponse:
        body = score_body(prompt, response, step=step, reference=reference, id=id, instance_id=instance_id,
                          metadata=metadata, **fields)
        return _answer(self._client().post("/score", json=body), ScoreResponse)

    async def score_async(self, prompt: Any, response: Any, *, step: int | None, reference: Any = None,
                          id: str | int | None = None, instance_id: str | int | None = None,
                          metadata: dict[str, Any] | None = None, **fields: Any) -> ScoreResponse:
        body = score_body(prompt, response, step=step, reference=reference, id=id, instance_id=instance_id,
                          metadata=metadata, **fields)
        return _answer(await self._aclient().post("/score", json=body), ScoreResponse)

    def validate(self, prompt: Any, response: Any, *, step: int | None, reference: Any = None,
                 id: str | int | None = None, instance_id: str | int | None = None,
                 metadata: dict[str, Any] | None = None, **fields: Any) -> ScoreResponse:
        """A validation rollout (the trainer's evaluation, not a training sample): judged with the rubric version
        a rollout of `step` gets, in no step (RUN/validation/)."""
        body = score_body(prompt, response, step=step, reference=reference, id=id, instance_id=instance_id,
                          metadata=metadata, **fields)
        return _answer(self._client().post("/validate", json=body), ScoreResponse)

    def rollouts_complete(self, step: int, *, shard: int = 0, shards: int = 1) -> CompleteResponse:
        """Step `step`'s rollouts are in. A trainer of `shards` processes sends one /complete per process,
        naming its `shard` (its rank): the server completes the step once every shard's is in."""
        return _answer(self._client().post("/complete", json=complete_body(step, shard, shards)), CompleteResponse)

    async def rollouts_complete_async(self, step: int, *, shard: int = 0, shards: int = 1) -> CompleteResponse:
        response = await self._aclient().post("/complete", json=complete_body(step, shard, shards))
        return _answer(response, CompleteResponse)

    def rubric_updated(self, step: int | None = None, *, timeout: float = 600.0) -> RubricStatus:
        """Block until the evolution of `step` (default: the latest complete step) has ended, or
        `timeout` seconds (then `timed_out` is true)."""
        return _answer(self._client().get("/rubric_status/wait", **self._wait_request(step, timeout)), RubricStatus)

    async def rubric_updated_async(self, step: int | None = None, *, timeout: float = 600.0) -> RubricStatus:
        response = await self._aclient().get("/rubric_status/wait", **self._wait_request(step, timeout))
        return _answer(response, RubricStatus)

    def rubric_status(self, step: int | None = None) -> RubricStatus:
        """Where the step (default: the latest complete step) stands now; 404 (ServeError) when none is."""
        return _answer(self._client().get("/rubric_status", params={} if step is None else {"step": step}),
                       RubricStatus)

    def discard(self, step: int, *, opened_before: float | None = None) -> DiscardResponse:
        """Drop an open step with its judged rollouts (a crashed run's partial batch); with `opened_before`
        (epoch seconds), only if it opened before then, else a 409."""
        body: dict[str, Any] = {"step": step} if opened_before is None else {"step": step, "opened_before": opened_before}
        return _answer(self._client().post("/discard", json=body), DiscardResponse)

    def outage(self, step: int, reason: str = "") -> CompleteResponse:
        """Step `step`'s batch was generated and none of it reached the server (its requests failed before the server
        took them): the step is written with no rollouts and evolves as skipped, so later steps go on. A 409 when
        the server holds rollouts of the step, or a step before it is missing."""
        return _answer(self._client().post("/outage", json={"step": step, "reason": reason[:2000]}), CompleteResponse)

    def health(self) -> Health:
        return _answer(self._client().get("/health"), Health)

    async def health_async(self) -> Health:
        return _answer(await self._aclient().get("/health"), Health)


class RewardClient:
    """The reference's client, by its names and request bodies (../shared/REFERENCE_API.md):
    `RewardClient(base_url, timeout=...)`, used as `async with`. Scoring is async only, as there, so
    that a step's rollouts are in flight together. The answers are the server's JSON as it sent them
    (`{"status": "complete"}`, `{"status": "updated", "mode": "global"}` from the reference), except
    `score_async`, which returns the reward as a float, or raises `ScoreFailed` when the judge could not
    score the rollout (never a made-up number)."""

    def __init__(self, base_url: str = DEFAULT_URL, timeout: float | None = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._sync: httpx.Client | None = None
        self._async: AmarisClient = AmarisClient(self.base_url, timeout=timeout)  # its per-loop, fork-safe pool

    async def __aenter__(self) -> RewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        await self._async.aclose()
        self.close()

    def _client(self) -> httpx.Client:
        if self._sync is None:
            self._sync = httpx.Client(base_url=self.base_url, timeout=self.timeout)
        return self._sync

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        if response.status_code != 200:
            raise _error(response)
        return response.json()

    async def score_async(self, rollout: dict[str, Any], metadata: dict[str, Any]) -> float:
        """POST /score {"rollout": rollout, "metadata": metadata}: the rollout's reward."""
        answer = self._json(await self._async._aclient().post("/score", json={"rollout": rollout,
                                                                              "metadata": metadata}))
        score = answer.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise ScoreFailed(f"rollout {rollout.get('id')!r} was not scored: {answer.get('error') or answer}")
        return float(score)

    def rollouts_complete(self) -> dict[str, Any]:
        """POST /complete with no body: the current batch of rollouts is complete."""
        return self._json(self._client().post("/complete"))

    async def rollouts_complete_async(self) -> dict[str, Any]:
        return self._json(await self._async._aclient().post("/complete"))

    def rubric_updated(self) -> dict[str, Any]:
        """GET /rubric_status/wait with no query: blocks until the step's rubric update is done."""
        return self._json(self._client().get("/rubric_status/wait"))

    async def rubric_updated_async(self) -> dict[str, Any]:
        return self._json(await self._async._aclient().get("/rubric_status/wait"))
