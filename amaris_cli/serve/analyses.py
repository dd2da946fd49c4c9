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
the scorer's concurrency` analyses are in flight (at least one, within the analyzer's own limit). Nor do
they take the server's CPU from /score, which is on the trainer's critical path where an analysis is not:
an analysis starts only once no rollout has arrived or been judged for `QUIET_S` (a trainer generating or
training, or a slow judge's wait). Under a steady stream of /score (a fast judge, requests back to back)
they wait for a pause, or for the step's completion. Once the step is complete (`settle`), nothing is
scored for it any more and its remaining analyses go at the analyzer's full concurrency, as `analyze`
would send them. A failure only means the evolution asks again.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable

from amaris_cli.agents.analyzer import analyze_rollout
from amaris_cli.models import Rollout, RubricSet, ScoreRecord
from amaris_cli.session import Session
from amaris_cli.stages.score import rubric_for

# How long /score must have been quiet before an analysis starts: longer than the gap between back-to-back
# requests of one client (well under a millisecond on loopback), shorter than any pause a trainer makes.
QUIET_S = 0.005


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
        # Analyses waiting for a slot, by step, in arrival order. Each is woken alone when its turn comes: a
        # condition's notify_all woke every waiting analysis at every release, which made a step of 2,000
        # analyses cost its square in wake-ups (5 ms per analysis, against a judge that answers at once).
        self._waiting: dict[int, deque[asyncio.Future[None]]] = {}
        self._urgent: set[int] = set()  # complete steps: their analyses go at full concurrency
        self._by_step: dict[int, set[asyncio.Task[None]]] = {}
        self._rubrics: dict[tuple[int, str | None], RubricSet] = {}
        self._failed_steps: set[int] = set()
        self._last_scoring = -math.inf  # the loop's time of the last rollout that arrived or was judged
        self._watch: asyncio.Task[None] | None = None  # until /score is quiet again; None while it is

    def scoring(self) -> None:
        """A rollout arrived or was judged: analyses not yet started wait until /score is quiet again."""
        self._last_scoring = asyncio.get_running_loop().time()
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._until_quiet())

    async def _until_quiet(self) -> None:
        """One timer for every waiting analysis (each on its own would wake the loop many times per ms)."""
        loop = asyncio.get_running_loop()
        while (left := self._last_scoring + QUIET_S - loop.time()) > 0:
            await asyncio.sleep(left)
        self._watch = None  # quiet: the next arrival starts a new timer
        self._dispatch()

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
        self._dispatch()
        # The tasks stay in _by_step while they are waited for: a stop meanwhile drops them as an open step's (most
        # of a step's analyses may wait for its completion), rather than waiting for them or leaving them running.
        tasks = list(self._by_step.get(step, ()))
        try:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:  # also when the wait is cancelled (a stop): a step number used again starts afresh
            self._by_step.pop(step, None)
            self._waiting.pop(step, None)
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
        self._waiting.pop(step, None)  # their waits, cancelled with them

    async def stop(self) -> None:
        for step in list(self._by_step):
            await self.cancel(step)
        if self._watch is not None:
            self._watch.cancel()

    def _may_start(self, step: int) -> bool:
        if step in self._urgent:
            return self._in_flight < self.full
        return self._watch is None and self._in_flight < self.background

    async def _slot(self, step: int) -> None:
        if step not in self._waiting and self._may_start(step):
            self._in_flight += 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(step, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # its slot was given as it was cancelled
                self._release()
            raise

    def _release(self) -> None:
        self._in_flight -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Give free slots to waiting analyses: complete steps' first, then (while /score is quiet) the others',
        each step's in arrival order (a cancelled wait is skipped)."""
        for step in sorted(self._waiting, key=lambda s: (s not in self._urgent, s)):
            queue = self._waiting[step]
            while queue and self._may_start(step):
                turn = queue.popleft()
                if not turn.done():
                    self._in_flight += 1
                    turn.set_result(None)
            if not queue:
                del self._waiting[step]

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
            self._release()
