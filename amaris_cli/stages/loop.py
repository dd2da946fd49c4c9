"""`loop`: score -> analyze -> summarize -> update over many steps, resumable at any point.

Timing modes:
  lag L      step t is scored with the newest rubric version <= t - L (version v is produced by
             the update of step v-1), as when the update of step t-1 still runs during step t.
  rescore    after the update of step t, step t is scored again with R_{t+1} (rescores.jsonl).
  update_every N   updates run after steps start+N-1, start+2N-1, ...; summaries every step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from amaris_cli.errors import StageFailed
from amaris_cli.memory.service import RunCatalog, index_step
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import Rollout
from amaris_cli.rollouts import read_rollouts
from amaris_cli.session import Session
from amaris_cli.stages.analyze import analyze_step
from amaris_cli.stages.common import store_rollouts
from amaris_cli.stages.score import score_step
from amaris_cli.stages.summarize import summarize_step
from amaris_cli.stages.update import UpdateOutcome, update_step


@dataclass
class StepReport:
    step: int
    rubric_version: int
    rollouts: int
    mean_reward: float | None
    failed: int
    strategy: str | None = None
    added: int = 0
    removed: int = 0
    rejected: int = 0
    rescore_mean: float | None = None
    tokens: int = 0
    wall_s: float = 0.0
    update: UpdateOutcome | None = field(default=None, repr=False)


def should_update(step: int, first_step: int, every: int) -> bool:
    return (step - first_step + 1) % every == 0


def load_step(source: Path | list[Rollout], step: int, mapping: dict[str, str], instance_field: str | None) -> list[Rollout]:
    rollouts = source if isinstance(source, list) else read_rollouts(source, mapping, instance_field, default_step=step)
    return [r.model_copy(update={"step": step}) for r in rollouts]


async def run_loop(
    session: Session,
    steps: dict[int, list[Rollout]],
    memory: MemoryStore | None,
    *,
    lag: int = 0,
    rescore: bool = False,
    on_error: str = "fail",
    on_step: Callable[[StepReport], None] | None = None,
    on_stage: Callable[[str, int], None] | None = None,
    on_record: Callable[[object], None] | None = None,
) -> list[StepReport]:
    """`on_stage(stage, step)` is called as each stage starts, `on_record` as each rollout of a
    per-rollout stage (score, analyze, rescore) finishes: enough for a progress bar."""
    settings = session.settings
    stage = on_stage or (lambda _stage, _step: None)
    first = min(steps)
    reports: list[StepReport] = []
    neutral = settings.pipeline.neutral_reward if on_error == "neutral" else None
    # Indexing a step (embedding its records) runs in a thread while the next step is scored and
    # analyzed, which is mostly waiting on the judge; it is awaited before the memory is used again.
    pending: asyncio.Task[int] | None = None

    async def settle() -> None:
        nonlocal pending
        if pending is not None:
            await pending
            pending = None

    for step, rollouts in steps.items():
        started = time.monotonic()
        tokens_before = _tokens(session)
        store_rollouts(session.run, step, rollouts)
        version = session.run.rubric_version_for(step, lag)
        stage("score", step)
        scored, _ = await score_step(session, step, rollouts, lag=lag, neutral_reward=neutral, on_done=on_record)
        report = StepReport(step=step, rubric_version=version if version is not None else -1, rollouts=len(rollouts),
                            mean_reward=scored.mean_reward, failed=scored.failed)
        if scored.failed and on_error == "fail":
            raise StageFailed(f"step {step}: {scored.failed} rollouts could not be judged (written as failed); "
                              "re-run the same command to retry them, or use --on-error skip|neutral")
        stage("analyze", step)
        await analyze_step(session, step, on_done=on_record)
        stage("summarize", step)
        updating = should_update(step, first, settings.pipeline.update_every)
        await settle()
        # A step that is updated is indexed after its update, whose retrieval must not see it.
        await summarize_step(session, step, None if updating else memory)
        if updating:
            stage("update", step)
            outcome = await update_step(session, step, memory, index=False)
            if memory is not None:
                pending = asyncio.create_task(asyncio.to_thread(index_step, memory, RunCatalog(session.run), step))
            report.update = outcome
            report.strategy = "/".join(sorted(set(outcome.strategies)))
            report.added, report.removed, report.rejected = outcome.added, outcome.removed, outcome.rejected
            if rescore:
                stage("rescore", step)
                again, _ = await score_step(session, step, rollouts, rubric_version=step + 1, output="rescores",
                                            neutral_reward=neutral, on_done=on_record)
                report.rescore_mean = again.mean_reward
        report.tokens = _tokens(session) - tokens_before
        report.wall_s = round(time.monotonic() - started, 3)
        reports.append(report)
        if on_step:
            on_step(report)
    await settle()
    return reports


def _tokens(session: Session) -> int:
    return sum(u.prompt_tokens + u.completion_tokens for u in session.client.usage.values())
