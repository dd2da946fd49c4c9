"""Helpers shared by the stages: bounded concurrent mapping, outcomes, rollouts on disk."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from amaris_cli.errors import AmarisError, InputError
from amaris_cli.jsonio import iter_jsonl, write_jsonl_atomic
from amaris_cli.models import Rollout
from amaris_cli.rundir import RunDir

A = TypeVar("A")
B = TypeVar("B")


async def bounded_map(items: Sequence[A], fn: Callable[[A], Awaitable[B]], limit: int,
                      on_done: Callable[[B], None] | None = None) -> list[B]:
    """Apply `fn` to every item with at most `limit` in flight; results in input order.
    Workers pull from a shared index, so memory stays O(limit) in tasks, not O(items)."""
    results: list[B | None] = [None] * len(items)
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < len(items):
            i = next_index
            next_index += 1
            results[i] = await fn(items[i])
            if on_done is not None:
                on_done(results[i])  # type: ignore[arg-type]

    tasks = [asyncio.create_task(worker()) for _ in range(max(1, min(limit, len(items))))]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        # One worker failed (e.g. the endpoint rejected the key): stop the others instead of letting
        # them send the rest of the stage's requests after the stage has already failed.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results  # type: ignore[return-value]


@dataclass
class StageOutcome:
    stage: str
    step: int
    total: int = 0
    done: int = 0
    failed: int = 0
    reused: int = 0
    mean_reward: float | None = None
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def stop(self) -> StageOutcome:
        self.wall_s = round(time.monotonic() - self.started, 3)
        return self


def rollouts_path(run: RunDir, step: int) -> Path:
    return run.step_dir(step) / "rollouts.jsonl"


def store_rollouts(run: RunDir, step: int, rollouts: list[Rollout], force: bool = False) -> None:
    """Write the step's normalized rollouts, or check they equal what is already there."""
    path = rollouts_path(run, step)
    rows = [r.model_dump(mode="json") for r in rollouts]
    if path.exists() and not force:
        existing = list(iter_jsonl(path))
        if existing != rows:
            raise AmarisError(
                f"{path}: step {step} already holds different rollouts; use another step, "
                "or --force to replace the step and everything derived from it"
            )
        return
    write_jsonl_atomic(path, rows)


def load_rollouts(run: RunDir, step: int) -> list[Rollout]:
    path = rollouts_path(run, step)
    if not path.exists():
        raise InputError(path, f"step {step} has no rollouts yet; run `amaris score ROLLOUTS.jsonl --run {run.path} --step {step}` first")
    return [Rollout.model_validate(row) for row in iter_jsonl(path)]
