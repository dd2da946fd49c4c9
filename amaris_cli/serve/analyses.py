"""Analysis as rollouts arrive (async mode): each judged rollout of an open step is analyzed in the
background at once, as the reference does, so that the evolution after /complete has only the summary
and the update left.

The analysis is the request `amaris analyze` sends for the rollout (agents/analyzer.py, with the rubric
version that scored it and the step's training context), sent by the server's own session, so it lands
in the run's calls.jsonl. The step's `amaris evolve` child then runs `analyze_step` as always: each of
its requests is already answered in the log (llm/cache.py answers a request the run holds, accepted),
so analyses.jsonl and its provenance are what `evolve` writes, byte for byte, without a model call.
The server hands the step to its evolution only once the step's analyses have settled (`settle`).

While rollouts arrive they never take a request slot the scorer could use: at most `llm.concurrency -
the scorer's concurrency` analyses are in flight (at least one, within the analyzer's own limit). Once the
step is complete (`settle`), nothing is scored for it any more and its remaining analyses go at the
analyzer's full concurrency, as `analyze` would send them. A failure only means the evolution asks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from amaris_cli.agents.analyzer import analyze_rollout
from amaris_cli.models import Rollout, RubricSet, ScoreRecord
from amaris_cli.session import Session
from amaris_cli.stages.score import rubric_for


def limits(session: Session) -> tuple[int, int]:
    """(analyses in flight while rollouts arrive, once the step is complete): the request slots the scorer
    cannot take (at least one), and the analyzer's own limit."""
    settings = session.settings
    full = min(settings.agent("analyzer").concurrency, settings.llm.concurrency)
    spare = settings.llm.concurrency - settings.agent("scorer").concurrency
    return max(1, min(full, spare)), full


class EarlyAnalyses:
    def __init__(self, session: Session, say: Callable[[str], None]) -> None:
        self.session = session
        self.say = say
        self.background, self.full = limits(session)
        self._in_flight = 0
        self._turn = asyncio.Condition()
        self._urgent: set[int] = set()  # complete steps: their analyses go at full concurrency
        self._by_step: dict[int, set[asyncio.Task[None]]] = {}
        self._rubrics: dict[tuple[int, str | None], RubricSet] = {}
        self._failed_steps: set[int] = set()

    def start(self, step: int, rollout: Rollout, record: ScoreRecord) -> None:
        """Analyze a judged rollout in the background (a rollout judged again is analyzed again)."""
        task = asyncio.create_task(self._analyze(step, rollout, record))
        tasks = self._by_step.setdefault(step, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def settle(self, step: int) -> None:
        """Return once the step's analyses are done (their answers are then in calls.jsonl); those still
        waiting go at full concurrency."""
        self._urgent.add(step)
        async with self._turn:
            self._turn.notify_all()
        tasks = self._by_step.pop(step, set())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._urgent.discard(step)
        self._failed_steps.discard(step)
        if not any(self._by_step.values()):
            self._rubrics.clear()  # read again for the next steps: the cache does not grow with the run

    async def cancel(self, step: int) -> None:
        """Drop the step's analyses (the step is discarded, or the server stops: the evolution asks again)."""
        tasks = self._by_step.pop(step, set())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def stop(self) -> None:
        for step in list(self._by_step):
            await self.cancel(step)

    async def _slot(self, step: int) -> None:
        async with self._turn:
            await self._turn.wait_for(
                lambda: self._in_flight < (self.full if step in self._urgent else self.background))
            self._in_flight += 1

    async def _release(self) -> None:
        async with self._turn:
            self._in_flight -= 1
            self._turn.notify_all()

    async def _analyze(self, step: int, rollout: Rollout, record: ScoreRecord) -> None:
        await self._slot(step)
        try:
            try:
                key = (record.rubric_version, record.instance_id)
                if key not in self._rubrics:
                    # The rubric that scored the record, read as `analyze` reads it.
                    self._rubrics[key] = rubric_for(self.session.run, record.rubric_version, record.instance_id,
                                                    exact=True)
                await analyze_rollout(self.session.kit, self._rubrics[key], rollout, record, step)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the evolution analyzes it again and reports what fails
                if step not in self._failed_steps:
                    self._failed_steps.add(step)
                    self.say(f"step {step}: an early analysis failed ({type(exc).__name__}: {exc}); the step's "
                             "evolution analyzes it again")
        finally:
            await asyncio.shield(self._release())
