"""Writing one step's rollouts and scores: the one path `score`, `loop` and `serve` take.

    with StepWriter(run, step, VersionRule(lag=1), role="score", say=say, wait=3600) as writer:
        outcome = await writer.write(session, rollouts, source)

The writer holds the step's lock (locks.py: another writer of the step gets exit 3 naming this one),
waits for the rubric version the schedule gives the step (schedule.py: exactly version t - lag, or the
version asked for), stores the rollouts and scores them with it (stages/score.py), under the session's
failure policy. `amaris serve` opens the writer at a step's first rollout, judges each rollout as it
arrives with `writer.limit`, and writes the step at /complete from the records it journaled (`known`),
so its files are what `score` writes for the same rollouts in the same order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from amaris_cli import artifacts, locks
from amaris_cli.artifacts import How
from amaris_cli.eventloop import blocking
from amaris_cli.models import Rollout, ScoreRecord
from amaris_cli.rundir import RunDir
from amaris_cli.schedule import scoring_limit, scoring_version
from amaris_cli.session import Session
from amaris_cli.stages.common import StageOutcome, store_rollouts
from amaris_cli.stages.score import score_step
from amaris_cli.training import SentTraining, write_training


@dataclass(frozen=True)
class VersionRule:
    """Which rubric version scores a step: exactly `rubric_version` when given, else the newest version
    <= step - lag that the run will have."""

    lag: int = 0
    rubric_version: int | None = None

    def limit(self, step: int) -> int:
        return self.rubric_version if self.rubric_version is not None else scoring_limit(step, self.lag)


class StepWriter:
    def __init__(self, run: RunDir, step: int, rule: VersionRule, *, role: str, say: Callable[[str], None],
                 wait: float, served: bool = False) -> None:
        self.run, self.step, self.rule = run, step, rule
        self.role, self.say, self.wait = role, say, wait
        self.served = served  # for `amaris serve`: its errors advise an HTTP client (schedule.scoring_version)
        self.version: int | None = None
        self._lock = ExitStack()

    @property
    def limit(self) -> int:
        return self.rule.limit(self.step)

    def lock(self) -> None:
        """Take the step's lock, or raise RunLockedError naming the process that holds it; while it is held, the
        step's provenance is kept in memory (artifacts.held: written before the lock is released)."""
        self._lock.enter_context(locks.step(self.run.path, self.step, self.role))
        self._lock.enter_context(artifacts.held(self.run, self.step))

    def release(self, *exc: Any) -> None:
        """Let the step go (`exc`: the exception it is let go for, if any: then a failed last write of its
        provenance does not hide it)."""
        self._lock.__exit__(*(exc or (None, None, None)))

    def wait_for_version(self, wait: float | None = None, stop: threading.Event | None = None) -> int:
        """The rubric version that scores the step, once every evolution that may write it is done (waiting
        up to `wait` seconds, the writer's own by default; `stop`: eventloop.blocking's)."""
        self.version = scoring_version(self.run, self.step, self.rule.lag, self.rule.rubric_version,
                                       wait=self.wait if wait is None else wait, say=self.say, served=self.served,
                                       stop=stop)
        return self.version

    async def __aenter__(self) -> StepWriter:
        """`async with`: the wait for the version runs beside the event loop (eventloop.blocking)."""
        self.lock()
        try:
            await blocking(lambda stop: self.wait_for_version(stop=stop))
        except BaseException:
            self.release()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.release(*exc)

    def __enter__(self) -> StepWriter:
        self.lock()
        try:
            self.wait_for_version()
        except BaseException:
            self.release()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release(*exc)

    async def write(self, session: Session, rollouts: list[Rollout], source: dict[str, Any], *, force: bool = False,
                    known: Mapping[str, ScoreRecord] | None = None,
                    on_done: Callable[[ScoreRecord], None] | None = None,
                    training: SentTraining | None = None, stored_as: How | None = None) -> StageOutcome:
        """Store the step's rollouts (`force`: replace different ones) and score them; `known` holds records
        already judged with this step's rubrics (serve), written as they are; `training`: what the step's
        requests said about training (serve, and a replay of a served step), kept in training.json;
        `stored_as`: the settings the rollouts' record names (a replay's, as its source stored them)."""
        store_rollouts(self.run, self.step, rollouts, source, force, stored_as or session.how)
        if training is not None:
            write_training(self.run, self.step, training, session.how)
        outcome, _ = await score_step(session, self.step, rollouts, limit=self.limit, lag=self.rule.lag,
                                      explicit_version=self.rule.rubric_version, on_done=on_done, known=known)
        # The step is scored: its records go to disk now, not when the lock is let go (serve answers /complete
        # before that, a loop evolves the step first): a reader in another process (`rewards`) needs them.
        artifacts.flush(self.run, self.step)
        return outcome
