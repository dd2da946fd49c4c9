"""`loop`: score -> evolve over many steps in one process, resumable at any point.

Each step is exactly what the separate commands do (`score --lag L`, then `evolve`), run in order,
so a loop and a shell script of separate commands write the same files.

Timing modes:
  lag L      step t is scored with the newest rubric version <= t - L (version v is produced by
             the update of step v-1), as when the update of step t-1 still runs during step t.
  rescore    after the update of step t, step t is scored again with R_{t+1} (rescores.jsonl).
  update_every N   updates run at one step of every N of the run (`update_at`: the last of them, or the
                   first as the reference does); summaries every step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from amaris_cli import artifacts
from amaris_cli.artifacts import How
from amaris_cli.memory.service import RunCatalog, in_thread, index_step
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import Rollout
from amaris_cli.schedule import update_decided
from amaris_cli.session import Session
from amaris_cli.stages.analyze import analyze_step
from amaris_cli.stages.evolve import evolve_step
from amaris_cli.stages.summarize import summarize_step
from amaris_cli.stages.update import UpdateOutcome
from amaris_cli.stages.writer import StepWriter, VersionRule
from amaris_cli.training import SentTraining, recorded_training


@dataclass
class StepPlan:
    """What to do with one step: its rollouts (and where they came from), and how to run it."""

    rollouts: list[Rollout]
    source: dict[str, Any] = field(default_factory=dict)
    lag: int = 0
    rubric_version: int | None = None
    evolve: bool = True
    update: bool | None = None  # None: by update_every
    rescore: bool = False
    # Without a whole evolution: the stages of one that stage commands ran (`analyze`, then `summarize`).
    stages: tuple[str, ...] = ()
    training: SentTraining | None = None  # what a served step's requests said about training (training.json)
    stored_as: How | None = None  # how the recorded run stored the rollouts (a replay), else as it scores them


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


Memory = MemoryStore | None | Callable[[], Awaitable[MemoryStore | None]]


class Indexer:
    """Indexing a step (embedding its records) runs in a thread while the next step is scored and
    analyzed, which is mostly waiting on the judge; it is awaited before the memory is used again.

    Given an opener instead of a store, the memory is opened (its writer lock taken) when an evolution
    first needs it: a loop that waits for an evolution running in another process must not hold the
    lock that evolution waits for."""

    def __init__(self, store: Memory) -> None:
        self._open = store if callable(store) else None
        self.store = None if callable(store) else store
        self._pending: asyncio.Task[int] | None = None

    def start(self, session: Session, step: int) -> None:
        if self.store is not None:
            store, catalog = self.store, RunCatalog(session.run)
            self._pending = asyncio.create_task(in_thread(store, lambda: index_step(store, catalog, step)))

    async def settle(self) -> MemoryStore | None:
        if self._pending is not None:
            task, self._pending = self._pending, None
            await task
        return self.store

    async def stop(self) -> None:
        """Stops an indexing in progress, once its thread has ended (the memory is closed next). The memory is then
        behind the run's files: the next update's sync indexes the rest. Awaited as `settle`, it went on to its end
        (minutes, for a big step or an embeddings endpoint that is down) before the command could stop."""
        if self._pending is not None:
            task, self._pending = self._pending, None
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if (me := asyncio.current_task()) is not None and me.cancelling():
                    raise  # Ctrl-C or SIGTERM, also one that came while a failed step stopped it: the command stops
            except Exception:  # noqa: BLE001 - the command's own error is the one to report
                pass

    async def memory(self) -> MemoryStore | None:
        """The memory for the next evolution, once the last indexing is done (opened on first use)."""
        await self.settle()
        if self._open is not None:
            self.store, self._open = await self._open(), None
        return self.store


async def run_step(session: Session, step: int, plan: StepPlan, indexer: Indexer, *, hooks: Any,
                   scoring_session: Session | None = None, wait: float = 0.0,
                   by_stage: dict[str, Session] | None = None) -> StepReport:
    """Score one step, then evolve it (when planned), holding the step's lock throughout; `wait`: how long
    to wait for an evolution of an earlier step that another process is running; `by_stage`: a session per
    evolution stage (evolve_step)."""
    run = session.run
    scorer = scoring_session or session
    started = time.monotonic()
    tokens_before = _tokens(session) + (_tokens(scorer) if scorer is not session else 0)
    rule = VersionRule(lag=plan.lag, rubric_version=plan.rubric_version)
    async with StepWriter(run, step, rule, role="loop", say=session.say, wait=wait) as writer:
        hooks.on_stage("score", step)
        scored = await writer.write(scorer, plan.rollouts, plan.source, on_done=hooks.on_record, training=plan.training,
                                    stored_as=plan.stored_as)
        report = StepReport(step=step, rubric_version=writer.version or 0, rollouts=len(plan.rollouts),
                            mean_reward=scored.mean_reward, failed=scored.failed)
        # Under `fail` the loop stops at failed scores, unless the evolution's policy (`session`'s, as `evolve`
        # would read it) carries the step, which it then takes as skipped.
        (session if plan.evolve else scorer).policy.not_evaluated("score", step, scored.failed, scored.total,
                                                                  scored.errors)
        if plan.evolve:
            update = update_decided(run, step, session.settings.pipeline, plan.update)

            evolved = await evolve_step(session, step, indexer.memory, update=update, rescore=plan.rescore and update,
                                        wait=wait, fail_if_idle=True, index_now=False,
                                        on_stage=hooks.on_stage, on_record=hooks.on_record, by_stage=by_stage)
            indexer.start(session, step)
            if evolved.updated is not None:
                outcome = evolved.updated
                report.update = outcome
                report.strategy = "/".join(sorted(set(outcome.strategies)))
                report.added, report.removed, report.rejected = outcome.added, outcome.removed, outcome.rejected
            if evolved.rescored is not None:
                report.rescore_mean = evolved.rescored.mean_reward
        elif plan.stages:
            stages = by_stage or {}
            await _run_stages(stages.get("analyze", session), stages.get("summarize", session), step, plan.stages,
                              indexer, hooks)
    report.tokens = _tokens(session) + (_tokens(scorer) if scorer is not session else 0) - tokens_before
    report.wall_s = round(time.monotonic() - started, 3)
    return report


async def _run_stages(analyzer: Session, summarizer: Session, step: int, stages: tuple[str, ...], indexer: Indexer,
                      hooks: Any) -> None:
    """What `amaris analyze` and `amaris summarize` of the step did, without an update (as a replay repeats)."""
    hooks.on_stage("analyze", step)
    analyzed = await analyze_step(analyzer, step, on_done=hooks.on_record)
    analyzer.policy.check("analyze", step, analyzed.failed, analyzed.total, analyzed.errors)
    if "summarize" in stages:
        hooks.on_stage("summarize", step)
        await summarize_step(summarizer, step, await indexer.memory())


async def run_loop(session: Session, steps: dict[int, StepPlan], store: Memory, *, hooks: Any,
                   wait: float = 0.0) -> list[StepReport]:
    """Every planned step in order (hooks: jobs.Hooks). `store` is the memory, or an opener of it (see
    Indexer)."""
    indexer = Indexer(store)
    reports: list[StepReport] = []
    try:
        for step, plan in steps.items():
            report = await run_step(session, step, plan, indexer, hooks=hooks, wait=wait)
            reports.append(report)
            hooks.on_step(report)
    except BaseException:
        await indexer.stop()  # Ctrl-C, SIGTERM or the step's failure: the command ends now
        raise
    await indexer.settle()
    return reports


def _tokens(session: Session) -> int:
    return sum(u.prompt_tokens + u.completion_tokens for u in session.client.usage.values())


def recorded_plan(src: Any, step: int, rollouts: list[Rollout]) -> StepPlan:
    """How a recorded step was run (from its provenance): what a replay repeats."""
    scored = artifacts.derivation(src, step, artifacts.SCORES)
    stored = artifacts.derivation(src, step, artifacts.ROLLOUTS)
    evolved = artifacts.evolution(src, step)
    inputs = scored.inputs if scored else {}
    # The rollouts as they were stored: by another command than the one that scored them last, when a `loop`
    # went over steps that `score` had scored (the same rollouts, kept with the settings of the command that
    # stored them).
    return StepPlan(rollouts=rollouts, source=stored.inputs.get("source", {}) if stored else {},
                    stored_as=stored.how if stored else None,
                    lag=inputs.get("lag") or 0, rubric_version=inputs.get("rubric_version"),
                    evolve=evolved is not None and evolved.status == "done",
                    update=evolved.update if evolved else None, rescore=bool(evolved and evolved.rescore),
                    stages=() if evolved is not None and evolved.status == "done" else recorded_stages(src, step),
                    training=recorded_training(src, step))


def recorded_stages(src: Any, step: int) -> tuple[str, ...]:
    """The evolution stages that stage commands ran on a step whose evolution is not done."""
    if artifacts.derivation(src, step, artifacts.ANALYSES) is None:
        return ()
    return ("analyze", "summarize") if artifacts.derivation(src, step, artifacts.SUMMARY) is not None else ("analyze",)
