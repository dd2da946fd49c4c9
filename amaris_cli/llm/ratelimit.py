"""Requests and tokens per minute, honoured before a request is sent.

Providers sell rate-limit tiers (requests per minute, tokens per minute) and often enforce them
over windows shorter than a minute. Each limit is a token bucket refilled at limit/60 per second
that holds at most one second's share (at least one request): requests go out evenly instead of in
bursts that would earn 429s. A request's tokens are estimated before sending (prompt characters / 4
plus its completion budget, which providers also count) and corrected by the endpoint's `usage`
once it answers. A request larger than the bucket waits for a full bucket and leaves it in debt, so
the average rate still holds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any


class GaveUp(Exception):
    """A wait for the rate budget ended because the request will not be sent (`give_up` said so)."""


class TokenBucket:
    def __init__(self, per_minute: float, burst_seconds: float = 1.0) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_seconds)
        self.level = self.capacity
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()  # first come, first served

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    async def take(self, amount: float, give_up: Callable[[], bool] | None = None) -> float:
        """Wait until `amount` may be spent and spend it; returns the seconds waited. Raises GaveUp, spending
        nothing, when `give_up()` is true at its turn or after a wait."""
        started = time.monotonic()
        async with self._lock:
            self._refill()
            need = min(amount, self.capacity)
            while self.level < need:
                if give_up is not None and give_up():
                    raise GaveUp
                await asyncio.sleep((need - self.level) / self.rate)
                self._refill()
            self.level -= amount
        return time.monotonic() - started

    def give_back(self, amount: float) -> None:
        """Correct an estimate (negative: more was used than estimated)."""
        self._refill()
        self.level = min(self.capacity, self.level + amount)


class RateLimiter:
    """The request and token budgets of one endpoint, key and model (either may be unlimited)."""

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self.requests = TokenBucket(requests_per_minute) if requests_per_minute else None
        self.tokens = TokenBucket(tokens_per_minute) if tokens_per_minute else None

    async def acquire(self, estimated_tokens: int, give_up: Callable[[], bool] | None = None) -> float:
        """Wait for the request's share of both budgets; GaveUp (both left as they were) when `give_up()` turns
        true while it waits (a step that spent its outage budget sends nothing)."""
        waited = 0.0
        if self.requests is not None:
            waited += await self.requests.take(1, give_up)
        if self.tokens is not None:
            try:
                waited += await self.tokens.take(estimated_tokens, give_up)
            except GaveUp:
                if self.requests is not None:
                    self.requests.give_back(1)
                raise
        return waited

    def give_back(self, estimated_tokens: int) -> None:
        """A request that took its share and was not sent gives it back."""
        if self.requests is not None:
            self.requests.give_back(1)
        if self.tokens is not None:
            self.tokens.give_back(estimated_tokens)

    def settle(self, estimated_tokens: int, used_tokens: int) -> None:
        """The endpoint reported `used_tokens` for a request estimated at `estimated_tokens`."""
        if self.tokens is not None and used_tokens > 0:
            self.tokens.give_back(estimated_tokens - used_tokens)


def estimate_tokens(messages: Sequence[dict[str, Any]], completion_budget: int) -> int:
    """A request's tokens as providers count them before it runs: prompt (about 4 characters per
    token, a few per message for the chat format) plus the completion budget."""
    prompt = sum(len(str(m.get("content", ""))) for m in messages) // 4 + 4 * len(messages)
    return prompt + completion_budget
