"""Helpers shared by the stages: bounded concurrent mapping, outcomes, the step's rollouts, and the
pieces every stage's inputs are made of (see artifacts.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from amaris_cli import artifacts
from amaris_cli.artifacts import How
from amaris_cli.errors import InputError
from amaris_cli.jsonio import iter_jsonl
from amaris_cli.models import Rollout, RubricSet
from amaris_cli.rundir import RunDir
from amaris_cli.session import Session

A = TypeVar("A")
B = TypeVar("B")


async def bounded_map(items: Sequence[A], fn: Callable[[A], Awaitable[B]], limit: int,
                      on_done: Callable[[B], None] | None = None) -> list[B]:
    """Apply `fn` to every item with at most `limit` in flight; results in input order.
    Workers pull from a shared index, so memory stays O(limit) in tasks, not O(items). An exception
    in one worker cancels the others and propagates."""
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
    rubric_versions: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def stop(self) -> StageOutcome:
        self.wall_s = round(time.monotonic() - self.started, 3)
        return self


def store_rollouts(run: RunDir, step: int, rollouts: list[Rollout], source: dict[str, Any] | None = None,
                   force: bool = False, how: How | None = None) -> bool:
    """Write the step's normalized rollouts, or check that they equal what is already there.
    Returns True when the file changed (then the step's evolution is no longer complete)."""
    path = artifacts.rollouts_path(run, step)
    rows = [r.model_dump(mode="json") for r in rollouts]
    if path.exists():
        existing = list(iter_jsonl(path))
        if existing == rows:
            if artifacts.freshness(run, step, artifacts.ROLLOUTS).sha is None:
                artifacts.record(run, step, artifacts.ROLLOUTS, {"source": source or {}}, how)
            return False
        if not force:
            raise InputError(path, f"step {step} already holds different rollouts; use another step, "
                             "or --force to replace the step and everything derived from it")
    artifacts.clear_evolved(run, step)
    artifacts.write_jsonl_recorded(run, step, artifacts.ROLLOUTS, rows, {"source": source or {}}, how)
    return True


def rubric_inputs(run: RunDir, rubrics: list[RubricSet]) -> dict[str, Any]:
    """Which rubric files a stage used, by content (a hand-edited or recomputed rubric changes this)."""
    out = {artifacts.rubric_key(r.version, r.instance_id): artifacts.rubric_sha256(run, r.version, r.instance_id)
           for r in rubrics}  # an instance without its own version is scored with the run's
    return dict(sorted(out.items()))


def agent_inputs(session: Session, *agents: str) -> dict[str, Any]:
    """What the given agents' answers depend on besides the data: prompt template, model and sampling."""
    return {agent: {"prompt": session.kit.template(agent).sha256,
                    "settings": session.settings.agent("scorer" if agent == "group_scorer" else agent).answer_inputs()}
            for agent in agents}


def training_inputs(session: Session, stage: bool = True, step: int | None = None) -> dict[str, Any]:
    """The training context the agents read; `stage=False` for the scorer, which is never told where
    training is (so a changed total_steps does not make scores stale) nor what a trainer said about it.
    With `step`, the step's own (training.py): the run's settings with what its requests said in their place."""
    sent = session.kit.step_training(step) if stage and step is not None else None
    settings = session.settings.training if sent is None else sent.applied_to(session.settings.training)
    training = settings.model_dump(mode="json", exclude=None if stage else {"total_steps"})
    inputs = {"training": training, "max_text_chars": session.settings.pipeline.max_text_chars}
    return inputs if sent is None else {**inputs, "training_sent": sent.as_inputs()}


class Upstream:
    """The step's files a stage builds on (rollouts, scores, analyses) as the stage found them: each checked once,
    not once per instance. The stage writes none of them, and each check looks up every instance's rubric
    (scores.jsonl names them all): checked per instance, quadratic in the instances (72,000 lookups at 120)."""

    def __init__(self, run: RunDir, step: int) -> None:
        self.run, self.step = run, step
        self._found: dict[str, artifacts.Freshness] = {}

    def freshness(self, name: str) -> artifacts.Freshness:
        if name not in self._found:
            self._found[name] = artifacts.freshness(self.run, self.step, name)
        return self._found[name]


def _upstream(run: RunDir, step: int, seen: Upstream | None) -> Upstream:
    return seen if seen is not None else Upstream(run, step)


def current_sha(run: RunDir, step: int, name: str, seen: Upstream | None = None) -> str | None:
    """The SHA-256 of an upstream file when whole and up to date, else None (for what may be missing); `seen`: the
    stage's view of its upstream files."""
    fresh = _upstream(run, step, seen).freshness(name)
    return fresh.sha if fresh.problem(step) is None else None


def analyses_sha(run: RunDir, step: int, skipped: bool, seen: Upstream | None = None) -> str | None:
    """The step's analyses, which a summary and the adoption gate are made from: required, unless the step (or
    the instance) is skipped (policy.py, `carry`: a step with failed scores is not analyzed), which takes those
    it has when whole and current."""
    if skipped:
        return current_sha(run, step, artifacts.ANALYSES, seen)
    return require_sha(run, step, artifacts.ANALYSES, "run `amaris analyze` first", seen)


def require_sha(run: RunDir, step: int, name: str, hint: str, seen: Upstream | None = None) -> str:
    """The SHA-256 of an upstream file that must be whole (written and recorded by its stage) and up to
    date (made from what the step holds now: building on it would describe other data)."""
    fresh = _upstream(run, step, seen).freshness(name)
    problem = fresh.problem(step)
    if problem is not None or fresh.sha is None:
        raise InputError(run.step_dir(step) / name, f"{problem}; {hint}")
    return fresh.sha
