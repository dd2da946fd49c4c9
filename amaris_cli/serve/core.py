"""What `amaris serve` does, without HTTP: open steps, judge rollouts as they arrive, complete steps
into the run directory, drive their evolutions, and say where each step stands.

Modes (README, "amaris serve"):

  async  step t is scored with rubric version t-1 exactly, as `amaris score --lag 1` scores it (the
         newest version <= t-1 the run will have: written by the evolution of step t-2, which the step
         waits for if it still runs). /score answers as soon as the rollout is judged.
  sync   lag 0, as `amaris score --lag 0` followed by `amaris evolve --rescore`: step t waits for the
         evolution of step t-1 and is scored with the rubric it wrote; /score answers once the step's
         own evolution is done, with the value re-scored by the rubric that evolution wrote.

A step is open from its first /score until /complete (or its `rollouts_per_step`-th rollout, or the
/complete of every shard when several processes send one each). A rollout that names no step joins the
open step (the one after the newest when none is open). While a step is open the server holds its lock
as `score` does (another process writing the step gets exit 3; a step another process holds is a 409
here), journals every judged rollout (journal.py) and, in async mode, analyzes it in the background
(analyses.py). On /complete the step's files are written whole by the step writer `score` uses, from
the journaled records (no request is sent again); once the step's analyses have settled the lock is
released and the step's evolution starts (evolutions.py). So the run directory is what `score` +
`evolve` write for the same rollouts in the same order, and every reader works on it unchanged.
A validation rollout (/validate, validation.py) is judged as a rollout of its step would be, in no step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import orjson

from amaris_cli import __version__, artifacts, locks
from amaris_cli.agents.scorer import score_rollout
from amaris_cli.alarms import SignalsMemo, alarms_at, run_alarms
from amaris_cli.errors import AmarisError, ConfigError, RunLockedError, WaitTimeout
from amaris_cli.figures import reward_figures, shown_number
from amaris_cli.llm.calllog import VALIDATION_CONTEXT
from amaris_cli.models import Rollout, RubricSet, ScoreRecord
from amaris_cli.options import ScoreOptions, ServeOptions
from amaris_cli.reader import RunReader
from amaris_cli.rollouts import content_id, instance_key
from amaris_cli.rundir import RunDir
from amaris_cli.schedule import GRACE_S, OutOfOrder, earlier_steps, refuse_unscored, scoring_limit
from amaris_cli.serve.analyses import EarlyAnalyses
from amaris_cli.serve.api import (
    CompleteNoop,
    CompleteResponse,
    DiscardResponse,
    Health,
    OpenStepStatus,
    ReferenceComplete,
    ReferenceRubricStatus,
    RubricStatus,
    ScoreResponse,
    ScoreValue,
    StepState,
)
from amaris_cli.serve.evolutions import Evolution, Evolutions, log_path
from amaris_cli.serve.journal import (
    CompleteEntry,
    Journal,
    JournalState,
    OpenEntry,
    ScoreEntry,
    ShardEntry,
    journal_path,
    journaled_steps,
    read_journal,
)
from amaris_cli.serve.openrlhf import OpenRLHFResponse
from amaris_cli.serve.validation import ValidationAnswers, record_validation
from amaris_cli.session import Session, open_session, run_settings
from amaris_cli.stages.common import StageOutcome, agent_inputs, training_inputs
from amaris_cli.stages.score import rubric_for
from amaris_cli.stages.writer import StepWriter, VersionRule
from amaris_cli.training import SentTraining, TrainingMetadata

Mode = Literal["async", "sync"]
T = TypeVar("T")
SOURCE = {"path": "POST /score"}  # what provenance records as the rollouts' input (score records its file)
OUTAGE_SOURCE = "POST /outage"  # a step written with no rollouts: none of its batch reached the server
OTHER_PROCESS_POLL_S = 0.5  # how often a wait looks at the disk for an evolution another process runs
DISK_CACHE_FILES = 6  # step files kept parsed for answers from disk (sync mode, retries)
RETRY_GRACE_S = 3.0  # OpenRLHF tries a failed request again a second later (utils/agent.py, 5 tries)
RETRY_MEMORY_S = 60.0  # how long a failed OpenRLHF request is known as such: its 5 tries fall well within
STOPPING = "the server is stopping; send the rollout again once it is back"
WAIT_SLICE_S = 3.0  # over schedule.GRACE_S, so an evolution nobody runs is still found within one slice


class ApiError(AmarisError):
    """An answer other than 200: the HTTP status and a reason a client can act on."""

    def __init__(self, status: int, message: str, *, step: int | None = None, rollout_id: str | None = None,
                 details: list[str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.step = step
        self.rollout_id = rollout_id
        self.details = details or []


@dataclass(frozen=True)
class ScoreIntake:
    """A /score body read: its step (None: the server's open step), the rollout as a file line would give
    it, whether its id was given, and what the request said about training (None when nothing)."""

    step: int | None
    rollout: Rollout
    explicit_id: bool
    training: TrainingMetadata | None


@dataclass
class OpenStep:
    step: int
    writer: StepWriter  # holds the step's lock from the first rollout to the step's files
    journal: Journal
    state: Literal["open", "completing"] = "open"
    rollouts: dict[str, Rollout] = field(default_factory=dict)  # every rollout claimed, judged or in flight
    records: dict[str, ScoreRecord] = field(default_factory=dict)  # in journal order (JournalState.order)
    inflight: dict[str, asyncio.Task[ScoreRecord]] = field(default_factory=dict)
    rubrics: dict[str | None, RubricSet] = field(default_factory=dict)
    completion: asyncio.Task[CompleteResponse] | None = None
    completing: asyncio.Event = field(default_factory=asyncio.Event)  # set once it takes no more rollouts
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # set once the step's files are written
    training: TrainingMetadata | None = None  # what the request that opened the step said about training
    told_differing: bool = False  # the server said that a request's training metadata differs
    shards: int | None = None  # processes whose /complete the step waits for, once one has sent it
    shards_in: set[int] = field(default_factory=set)
    opened_at: float | None = None
    # Failed judgements whose client retries the same request (OpenRLHF), and when the latest failed: the step
    # is written only once they are judged again or RETRY_GRACE_S passed. `sealed`: its files are being written.
    retried: set[str] = field(default_factory=set)
    last_failure: float = 0.0
    retry_came: asyncio.Event = field(default_factory=asyncio.Event)  # set when a held failure is sent again
    # Rollouts the endpoint refused to judge (a rejected key: 502), out of the step's places but held for their
    # client's retry as `retried` is: the completion waits RETRY_GRACE_S after the latest refusal.
    refused: dict[str, Rollout] = field(default_factory=dict)
    sealed: bool = False

    def begin_completion(self) -> None:
        self.state = "completing"
        self.completing.set()

    @property
    def limit(self) -> int:
        return self.writer.limit

    def missing_shards(self) -> list[int]:
        return [] if self.shards is None else [i for i in range(self.shards) if i not in self.shards_in]

    def status(self) -> OpenStepStatus:
        return OpenStepStatus(step=self.step, state=self.state, rollouts=len(self.rollouts), judged=len(self.records),
                              shards=self.shards, shards_in=sorted(self.shards_in), opened_at=self.opened_at)


class ServeCore:
    def __init__(self, options: ServeOptions, say: Callable[[str], None] = print) -> None:
        self.options = options
        self.run = RunDir(options.run)
        self.say = say
        self.steps: dict[int, OpenStep] = {}
        self.stopping = asyncio.Event()
        self._stack = ExitStack()
        self._opening: dict[int, asyncio.Lock] = {}
        self._opening_now: set[int] = set()  # steps whose first rollout is opening them
        self._tasks: set[asyncio.Task[Any]] = set()
        self._disk_cache: dict[tuple[int, str], tuple[tuple[int, int], dict[str, Any] | None]] = {}
        self._alarm_signals = SignalsMemo()  # /rubric_status's alarms: each step's files read once per version
        # A failed OpenRLHF request's placements (step, rollout id) by its body's digest, oldest first: two samples
        # with the same prompt and response send the same body, and each retry takes one try's places.
        self._failed_requests: dict[str, list[tuple[float, list[tuple[int, str]]]]] = {}
        # The judgements of an OpenRLHF request whose client went away before its answer, by its body's digest.
        self._abandoned_requests: dict[str, list[tuple[float, list[asyncio.Task[ScoreResponse]]]]] = {}
        self._validated = ValidationAnswers(self.run)
        self._validating: dict[tuple[int, str], tuple[Rollout, asyncio.Task[ScoreRecord]]] = {}
        # The newest step this server completed: its rollouts, and when.
        self._completed_last: tuple[int, dict[str, Rollout], float] | None = None
        self.session: Session | None = None
        self.analyses: EarlyAnalyses | None = None
        self.evolutions = Evolutions(self.run, options.evolve_options, say)

    # --- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the judge session and resume what a previous server left in its journals."""
        run, options = self.run, self.options
        # The scoring session is what `amaris score` of the step would open: the flags the two share.
        flags = options.config_layer(only=ScoreOptions.field_names())
        self.session = self._stack.enter_context(open_session(run, run_settings(run, options.config_layer()),
                                                              options.judge.value, flags=flags, announce=self.say,
                                                              recheck_after=options.recheck_after))
        settings = self.session.settings
        if settings.pipeline.group_by != "none":
            raise ConfigError(f"{run.path}: pipeline.group_by = {settings.pipeline.group_by!r}: `amaris serve` judges "
                              "each rollout as it arrives, one request per rollout; score grouped runs with `amaris score`")
        if options.mode.value == "async" and options.early_analysis:
            self.analyses = EarlyAnalyses(self.session, self.say)
        for step in journaled_steps(run):
            await self._resume_at_start(step)
        self._completed_last = self._completed_before_start()

    def _completed_before_start(self) -> tuple[int, dict[str, Rollout], float] | None:
        """The run's newest step, when it was written within RETRY_MEMORY_S, as the step this server completed
        last: a client whose answer a restart cut off sends its rollout again, and without this it was judged
        into a new step, one rollout of the batch before it (read once, at the start)."""
        steps = [s for s in artifacts.steps_with_rollouts(self.run) if s not in self.steps]
        if not steps:
            return None
        path = artifacts.rollouts_path(self.run, steps[-1])
        age = time.time() - path.stat().st_mtime
        if not 0 <= age <= RETRY_MEMORY_S:
            return None
        held = {r.id: r for r in artifacts.load_rollouts(self.run, steps[-1])}
        return steps[-1], held, time.monotonic() - age

    def begin_stop(self) -> None:
        """A signal came: take no more rollouts, end the waits, start no more evolutions (the journals
        of steps completed from now on make a restart evolve them)."""
        self.stopping.set()
        self.evolutions.stopping = True
        if self.session is not None:  # a judgement waiting out an outage is not finished: 503, sent again later
            self.session.client.stop_waiting()

    async def stop(self, grace: float = 30.0) -> None:
        """Finish what is in flight (bounded), journal it, interrupt evolutions, release every lock."""
        self.begin_stop()
        inflight = [t for st in self.steps.values() for t in st.inflight.values()] + list(self._tasks)
        if inflight:
            _, late = await asyncio.wait(inflight, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        if self.analyses is not None:
            await self.analyses.stop()  # the evolutions, on restart, ask again for what was not answered
        await self.evolutions.stop()
        for st in self.steps.values():
            st.journal.close()
            st.writer.release()
        if self.session is not None:
            await self.session.client.aclose()
        self._stack.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- opening steps -----------------------------------------------------------------------------
    def _writer(self, step: int, lag: int) -> StepWriter:
        """The step's writer, holding its lock: a step another process holds is a 409 naming it."""
        writer = StepWriter(self.run, step, VersionRule(lag=lag), role="score", say=self.say, wait=self.options.wait,
                            served=True)
        try:
            writer.lock()
        except RunLockedError as exc:
            raise ApiError(409, str(exc), step=step) from None
        return writer

    async def _resume(self, step: int) -> None:
        """Go on with a step a previous server left in its journal. A step another process holds is said and
        left alone at start-up (`strict`: a 409 naming the holder, for a request that needs the step)."""
        path = journal_path(self.run, step)
        state = read_journal(path)
        header = state.header
        mode = self.options.mode.value
        if header.mode != mode:
            what = ("is complete and its evolution (with the re-scoring sync mode asks for) is not done"
                    if header.mode == "sync" and state.complete else
                    "is complete and its evolution is not done" if state.complete else
                    f"is open with {len(state.order)} judged rollout(s)")
            raise ConfigError(f"{path}: step {step} was served in {header.mode} mode (lag {header.lag}) and {what}; "
                              f"restart with --mode {header.mode} to finish it"
                              + ("" if state.complete else ", or delete the file to discard its rollouts"))
        if not (state.complete and self._files_written(step)) and header.scoring is not None:
            changed = _differences(header.scoring, self._scoring_inputs())
            if changed:
                raise ConfigError(f"{path}: step {step} was judged with other scoring settings than this server's "
                                  f"({', '.join(changed)}); restart with the options (--model, --on-error, the run's "
                                  "config) it was served with to finish it"
                                  + ("" if state.complete else ", or delete the file to discard its rollouts"))
        if state.complete:
            if not self._files_written(step):
                writer = self._writer(step, header.lag)
                try:
                    await self._write_step(writer, state, header.training)
                except BaseException as exc:  # the error to report is this one, not a failed write on the way out
                    writer.release(type(exc), exc, exc.__traceback__)
                    raise
                writer.release()
            self._evolve(step)
            self.say(f"step {step}: complete; its evolution resumes")
            return
        writer = self._writer(step, header.lag)
        st = OpenStep(step=step, writer=writer, journal=Journal(path), rollouts=dict(state.rollouts),
                      records=dict(state.records), training=header.training, shards=state.shards,
                      shards_in=set(state.shards_in), opened_at=header.opened_at)
        self.steps[step] = st
        self._tell_training(st)
        self.evolutions.warm()
        self.say(f"step {step}: open again with the {len(st.records)} rollout(s) judged before the restart")
        if self.options.rollouts_per_step and len(st.rollouts) >= self.options.rollouts_per_step:
            # The server stopped between the N-th rollout and the completion: no further rollout comes to start it.
            st.begin_completion()
            self._spawn(self._auto_complete(step))

    async def _resume_at_start(self, step: int) -> None:
        try:
            await self._resume(step)
        except ApiError as exc:  # another process holds the step: a request for it will say so
            self.say(f"step {step}: not resumed: {exc}")

    def _scoring_inputs(self) -> dict[str, Any]:
        """What a judged record depends on besides its rollout and rubric, as `score_step` records it."""
        assert self.session is not None
        inputs = {"agents": agent_inputs(self.session, "scorer"), "policy": self.session.policy.as_inputs(),
                  **training_inputs(self.session, stage=False)}
        return orjson.loads(orjson.dumps(inputs))  # as the journal gives it back

    def _files_written(self, step: int) -> bool:
        scores = artifacts.freshness(self.run, step, artifacts.SCORES)
        return scores.whole and artifacts.ROLLOUTS not in scores.upstream

    async def _open(self, step: int, training: TrainingMetadata | None = None) -> OpenStep | None:
        """The open step, opening it on its first rollout (whose `training` metadata becomes the step's);
        None when the step is complete."""
        if step in self.steps:
            return self.steps[step]
        self._opening_now.add(step)
        try:
            return await self._open_new(step, training)
        finally:
            self._opening_now.discard(step)

    async def _open_new(self, step: int, training: TrainingMetadata | None) -> OpenStep | None:
        async with self._opening.setdefault(step, asyncio.Lock()):
            if step in self.steps:
                return self.steps[step]
            if artifacts.rollouts_path(self.run, step).exists():
                return None  # complete (its journal, if any, stays until its evolution is done: not resumed again)
            if journal_path(self.run, step).exists():  # left by a server whose lock was held at our start
                await self._resume(step)
                return self.steps.get(step)
            lag = self.options.lag
            rule = VersionRule(lag=lag)
            self._refuse_unscored(step)
            await self._await_served(range(0, rule.limit(step)), step)
            writer = self._writer(step, lag)
            try:
                if artifacts.rollouts_path(self.run, step).exists():
                    writer.release()
                    return None
                # The exact version `score --lag` takes: waits while the evolution that writes it runs.
                await self._wait_for_version(writer)
                opened_at = round(time.time(), 3)
                journal = Journal.create(self.run, OpenEntry(step=step, mode=self.options.mode.value, lag=lag,
                                                             limit=writer.limit, scoring=self._scoring_inputs(),
                                                             training=training, opened_at=opened_at))
            except BaseException:
                writer.release()
                raise
            st = OpenStep(step=step, writer=writer, journal=journal, training=training, opened_at=opened_at)
            self.steps[step] = st
            self._tell_training(st)
            self.evolutions.warm()  # a worker starts up while the step's rollouts come
            self.say(f"step {step}: open (rubric versions <= {writer.limit})")
            return st

    def _tell_training(self, st: OpenStep) -> None:
        """The agents of this process (the early analyses) read the step's training metadata from here until
        training.json holds it."""
        if self.session is not None:
            self.session.kit.tell_training(st.step, st.training)

    def _refuse_unscored(self, step: int, evolution: bool = False) -> None:
        """A 409 at once for a step whose rubric version (or, `evolution`, whose evolution) waits on a step nobody
        sends (schedule.refuse_unscored)."""
        first = earlier_steps(self.run, step).start
        steps, needed_for = ((range(first, step), f"the evolution of step {step}") if evolution else
                             (range(first, min(scoring_limit(step, self.options.lag), step)),
                              f"scoring step {step} with --lag {self.options.lag}"))
        refuse_unscored(self.run, steps, needed_for, served=True, held={*self.steps, *self._opening_now})

    def _unnamed_step(self) -> int:
        """The step a rollout that names none joins: the newest open step, else the one after the newest
        step the run or this server knows."""
        open_now = [s for s, st in self.steps.items() if st.state == "open"] + list(self._opening_now)
        if open_now:
            return max(open_now)
        known = [*self.steps, *self.evolutions.by_step, *artifacts.step_numbers(self.run)]
        return max(known, default=-1) + 1

    def _holding(self, rollout: Rollout) -> int | None:
        """The step that holds a rollout sent without a step whose id and content it already holds: a client's
        retry after its request timed out, answered from that step. A retry that came while its step completed
        was judged again into the next step, and every later step then took one rollout of the batch before it.
        Only the newest steps: a step this server holds with no open step after it, else the step it completed
        last while no step is open (a later batch that repeats an id and its text joins the open step)."""
        open_now = [s for s, st in self.steps.items() if st.state == "open"] + list(self._opening_now)
        newest_open = max(open_now, default=-1)
        for s, st in self.steps.items():
            as_held = rollout.model_copy(update={"step": s})
            if s >= newest_open and as_held in (st.rollouts.get(rollout.id), st.refused.get(rollout.id)):
                return s
        if open_now or self._completed_last is None:
            return None
        step, held, at = self._completed_last
        if time.monotonic() - at > RETRY_MEMORY_S:  # a client's retry comes within its tries, a new batch later
            return None
        return step if held.get(rollout.id) == rollout.model_copy(update={"step": step}) else None

    async def _until(self, events: list[asyncio.Event], timeout: float | None) -> None:
        """Return when one of `events` is set, the server stops, or `timeout` seconds pass (None: no limit)."""
        waits = [asyncio.ensure_future(e.wait()) for e in [*events, self.stopping]]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _change_of(self, step: int) -> list[asyncio.Event]:
        """What marks the next change of a step this server drives: its files written, its evolution ended
        (empty when this server does not drive the step: another process may, which only the disk tells)."""
        if step in self.steps:
            return [self.steps[step].closed]
        if self.evolutions.running(step):
            return [self.evolutions.by_step[step].finished]
        return []

    async def _await_served(self, steps: range, for_step: int) -> None:
        """Wait for the steps this server has open or is evolving among `steps` to be complete and evolved
        (their evolutions write the rubric versions `for_step` is scored with). A step left open, with no
        /complete on its way, is a 409 after a short grace, as `score` fails on an evolution nobody runs."""
        deadline = time.monotonic() + self.options.wait
        told: set[int] = set()
        while True:
            # The steps this server knows, not every step of the range: a step near MAX_STEP has a billion.
            known = {*self.steps, *self.evolutions.by_step}
            pending = sorted(s for s in known if s in steps and (s in self.steps or self.evolutions.running(s)))
            if not pending:
                return
            s = pending[0]
            if self.stopping.is_set():
                raise ApiError(503, "the server is stopping", step=for_step)
            now = time.monotonic()
            if now > deadline:
                raise WaitTimeout(f"scoring step {for_step}: gave up after {self.options.wait:g}s waiting for step {s} "
                                  "to be complete and evolved")
            left_open = s in self.steps and self.steps[s].state == "open"
            if left_open:
                # Give a /complete on its way a moment, then say what the trainer must do.
                await self._until([self.steps[s].completing, self.steps[s].closed], GRACE_S)
                if s in self.steps and self.steps[s].state == "open":
                    raise ApiError(409, f"step {for_step} is scored with rubric versions <= {steps.stop}, which the "
                                   f"evolution of step {s} writes, but step {s} is still open: POST /complete for it "
                                   "first", step=for_step)
                continue
            if s not in told:
                self.say(f"step {for_step} waits for step {s} to be complete and evolved")
                told.add(s)
            await self._until(self._change_of(s), deadline - now)

    async def _wait_for_version(self, writer: StepWriter) -> None:
        """The writer's wait for its rubric version, which waits in a thread for another process's evolutions,
        run in slices: a signal then ends the wait within seconds (one long wait kept the stopped server alive
        until --wait ran out, as nothing can end a thread)."""
        deadline = time.monotonic() + self.options.wait
        said: set[str] = set()

        def say_once(text: str) -> None:
            if text not in said:
                said.add(text)
                self.say(text)

        writer.say = say_once
        while True:
            if self.stopping.is_set():
                raise ApiError(503, "the server is stopping", step=writer.step)
            left = deadline - time.monotonic()
            try:
                await asyncio.to_thread(writer.wait_for_version, max(0.0, min(WAIT_SLICE_S, left)))
                return
            except WaitTimeout:
                if time.monotonic() >= deadline:
                    raise WaitTimeout(f"scoring step {writer.step}: gave up after {self.options.wait:g}s waiting for "
                                      "the evolutions that write its rubric version") from None

    # --- scoring ---------------------------------------------------------------------------------
    async def score(self, step: int | None, rollout: Rollout, explicit_id: bool,
                    training: TrainingMetadata | None = None, *, retried_if_failed: bool = False) -> ScoreResponse:
        """Judge one rollout of `step` (None: the open step) and answer its score. `training`: what the
        request said about training; the first request of a step fixes the step's. `retried_if_failed`: the
        client sends a failed request again (OpenRLHF), so a failed judgement is held for its retry."""
        return await self._served(self._score(step, rollout, explicit_id, training, retried_if_failed), step)

    async def _served(self, work: Coroutine[Any, Any, ScoreResponse], step: int | None) -> ScoreResponse:
        """A judgement run as the server's own task: a client that goes away ends only its wait, also while the
        step is being opened (its rollout is judged and journaled all the same)."""
        return await asyncio.shield(self._served_task(work, step))

    def _served_task(self, work: Coroutine[Any, Any, ScoreResponse], step: int | None) -> asyncio.Task[ScoreResponse]:
        if self.stopping.is_set():
            work.close()
            raise ApiError(503, STOPPING, step=step)
        if self.analyses is not None:
            self.analyses.scoring()  # a trainer waits: early analyses give way
        task = self._spawn(work)
        task.add_done_callback(_settled)  # its error goes to the client that waits, if one still does
        return task

    async def _score(self, step: int | None, rollout: Rollout, explicit_id: bool,
                     training: TrainingMetadata | None, retried_if_failed: bool) -> ScoreResponse:
        # A rollout without a step joins the open step; when that one took its last rollout meanwhile, the next
        # (each turn some rollout takes a place, so many at once under --rollouts-per-step all get one in time).
        deadline = time.monotonic() + self.options.wait
        if step is None and explicit_id:
            step = self._holding(rollout)  # a client's retry of a rollout a step already holds: that step's
        while True:
            if self.stopping.is_set():
                raise ApiError(503, STOPPING, step=step, rollout_id=rollout.id)
            chosen = self._unnamed_step() if step is None else step
            st = await self._open(chosen, training)
            if st is not None and not st.sealed and explicit_id and \
                    st.refused.get(rollout.id) == rollout.model_copy(update={"step": chosen}):
                del st.refused[rollout.id]  # a retry of a rollout the endpoint refused: its place again
                st.retry_came.set()
                if st.state != "open":  # the completion waits for it (an open step counts it as a new arrival)
                    st.rollouts[rollout.id] = rollout.model_copy(update={"step": chosen})
                    return await self._judged(st, st.rollouts[rollout.id], retried_if_failed)
            if st is not None and st.state == "open":
                return await self._score_in(st, rollout.model_copy(update={"step": chosen}), explicit_id, training,
                                            retried_if_failed)
            if step is not None:
                return await self._answer_closed(step, rollout.model_copy(update={"step": step}), explicit_id, st)
            if time.monotonic() > deadline:
                raise ApiError(503, f"gave up after {self.options.wait:g}s: every open step closed before it took "
                               "the rollout; send it again", rollout_id=rollout.id)
            await asyncio.sleep(0)

    async def score_openrlhf(self, intakes: list[ScoreIntake], request_key: str) -> OpenRLHFResponse:
        """OpenRLHF's remote reward request: each query a rollout of the open step, judged together. A rollout
        the judge could not score makes the request fail (OpenRLHF retries it, then leaves the sample without
        a reward): OpenRLHF reads every reward as a number, and none is made up. The retry of a failed request
        (the same body, `request_key` its digest) is answered from the rollouts the first try placed: those
        scored as they were, the failed ones judged again in their places, never new rollouts."""
        if not self.options.rollouts_per_step:
            raise ApiError(409, "OpenRLHF's requests name no step and nothing completes one: start amaris serve with "
                           "--rollouts-per-step N (N: the responses of one training batch, rollout_batch_size x "
                           "n_samples_per_prompt)")
        assert self.session is not None
        # Held for a retry: a failure OpenRLHF is answered with is a failed request, which it sends again; not under
        # neutral (answered with a number) nor in sync mode (answered after the step is written).
        retried = self.session.policy.name != "neutral" and self.options.lag == 1
        self._failed_requests = _recent(self._failed_requests)
        self._abandoned_requests = _recent(self._abandoned_requests)
        abandoned = self._abandoned_requests.get(request_key, [])
        tries = self._failed_requests.get(request_key, [])
        placed = tries.pop(0)[1] if retried and tries and not abandoned else []
        if abandoned:  # the same request sent again after its client gave up waiting: the first try's judgements
            judgements = abandoned.pop(0)[1]
        elif len(placed) == len(intakes):
            judgements = [self._served_task(self._again(step, rid), step) for step, rid in placed]
        else:
            judgements = [self._served_task(self._score(None, i.rollout, i.explicit_id, None, retried), None)
                          for i in intakes]
        try:
            answers = await asyncio.gather(*(asyncio.shield(j) for j in judgements))
        except asyncio.CancelledError:
            # OpenRLHF gives a request 180 s in all, then sends it again (5 tries); a sync answer waits for the
            # whole step and its evolution, which may take longer. The resend was a new rollout: the step took
            # it in place of one of the batch, and the next step began with the rest of them.
            self._abandoned_requests.setdefault(request_key, []).append((time.monotonic(), judgements))
            raise
        failed = [a for a in answers if a.score is None]
        if failed:
            if retried:
                places = [(a.step, a.id) for a in answers]
                self._failed_requests.setdefault(request_key, []).append((time.monotonic(), places))
            raise ApiError(502, f"the judge could not score {len(failed)} of the {len(answers)} response(s): "
                           f"{failed[0].error}", step=failed[0].step, rollout_id=failed[0].id)
        return OpenRLHFResponse.of([float(a.score) for a in answers if a.score is not None],
                                   judge_failed=[float(a.status == "failed") for a in answers],
                                   amaris_step=[float(a.step) for a in answers])

    async def validate(self, step: int | None, rollout: Rollout, explicit_id: bool = False) -> ScoreResponse:
        """Judge a validation rollout (validation.py) with the rubric version a training rollout of `step` gets
        (None: of the step a rollout naming none would join). It joins no step: no step's evolution learns from
        it, --rollouts-per-step does not count it, and it is kept in RUN/validation/. With an id, the same rollout
        sent again for the step (a client's retry) is answered as it was, not judged or kept again."""
        return await self._served(self._validate(step, rollout, explicit_id), step)

    async def _validate(self, step: int | None, rollout: Rollout, explicit_id: bool) -> ScoreResponse:
        assert self.session is not None
        chosen = self._unnamed_step() if step is None else step
        rollout = rollout.model_copy(update={"step": chosen})
        if not explicit_id:
            return _response(chosen, await self._validate_now(chosen, rollout))
        # A client's retry (same id and content): the answer it was given, or the judgement still running for it.
        answered = self._validated.answers(chosen).get(rollout.id)
        if answered is not None and answered[0] == rollout:
            return _response(chosen, answered[1])
        running = self._validating.get((chosen, rollout.id))
        if running is None or running[0] != rollout:
            running = (rollout, self._spawn(self._validate_now(chosen, rollout)))
            self._validating[(chosen, rollout.id)] = running
            running[1].add_done_callback(_settled)  # its error goes to the clients that wait, if any still do

            def forget(_task: object, key: tuple[int, str] = (chosen, rollout.id), mine: Any = running) -> None:
                if self._validating.get(key) is mine:
                    del self._validating[key]

            running[1].add_done_callback(forget)
        return _response(chosen, await asyncio.shield(running[1]))

    async def _validate_now(self, chosen: int, rollout: Rollout) -> ScoreRecord:
        assert self.session is not None
        rule = VersionRule(lag=self.options.lag)
        if chosen not in self.steps:  # a step this server holds was checked when it opened
            self._refuse_unscored(chosen)
        await self._await_served(range(0, rule.limit(chosen)), chosen)
        # The version wait of a step's writer, without the step's lock: the training step may be open meanwhile.
        await self._wait_for_version(StepWriter(self.run, chosen, rule, role="serve", say=self.say,
                                                wait=self.options.wait, served=True))
        key = instance_key(rollout) if self.session.settings.pipeline.per_instance else None
        rubric = rubric_for(self.run, rule.limit(chosen), key)
        record = self.session.policy.score(await score_rollout(self.session.kit, rubric, rollout, chosen,
                                                               VALIDATION_CONTEXT))
        record_validation(self.run, chosen, rollout, record)
        if record.status == "scored":  # a failed one is judged again when sent again, as /score does
            self._validated.answers(chosen)[rollout.id] = (rollout, record)
        return record

    async def _score_in(self, st: OpenStep, rollout: Rollout, explicit_id: bool,
                        training: TrainingMetadata | None, retried_if_failed: bool = False) -> ScoreResponse:
        step = st.step
        if training is not None and training != st.training and not st.told_differing:  # None: said nothing
            st.told_differing = True
            fields = (training or TrainingMetadata()).differences(st.training or TrainingMetadata())
            self.say(f"step {step}: a request's training metadata differs from the step's ({', '.join(fields)}); "
                     "the step keeps what its first request said (training.json)")
        rid = rollout.id
        if explicit_id and rid in st.rollouts:
            if st.rollouts[rid] != rollout:
                raise ApiError(409, f"id {rid!r} already names another rollout of step {step}: an id names one "
                               "rollout (the samples of one prompt need one each); a trainer resumed from a checkpoint "
                               f"that generates the step again can drop the whole step first, POST /discard "
                               f"{{\"step\": {step}}}: every rollout it holds, those sent since the restart too",
                               step=step, rollout_id=rid)
            return await self._judged(st, rollout, retried_if_failed)  # a retry: its answer, or judged again
        if not explicit_id:
            rollout = rollout.model_copy(update={"id": _free_id(rid, st.rollouts)})
        st.rollouts[rollout.id] = rollout
        if self.options.rollouts_per_step and len(st.rollouts) >= self.options.rollouts_per_step:
            st.begin_completion()  # no further arrivals; the completion waits for those in flight
            self._spawn(self._auto_complete(step))
        return await self._judged(st, rollout, retried_if_failed)

    async def _again(self, step: int, rid: str) -> ScoreResponse:
        """A rollout sent again by a client that retries a failed request: its answer, the judgement again when it
        failed and its step is not being written yet; once written, its record as written."""
        st = self.steps.get(step)
        if st is not None and not st.sealed and rid in st.rollouts:
            st.retry_came.set()  # a completion waiting for it wakes at the next yield: its judgement is in flight then
            return await self._judged(st, st.rollouts[rid], retried_if_failed=True)
        if st is not None:
            await self._until([st.closed], self.options.wait)  # being written: its record as written, in a moment
        records = self._on_disk(step, artifacts.SCORES) or {}
        record = records.get(rid)
        if not isinstance(record, ScoreRecord):
            raise ApiError(409, f"rollout {rid!r} of step {step}, sent again, is no longer in the step", step=step,
                           rollout_id=rid)
        return await self._respond(step, record)

    async def _judged(self, st: OpenStep, rollout: Rollout, retried_if_failed: bool) -> ScoreResponse:
        """The answer for a rollout the step holds: its record when scored, the judgement in flight, else (new,
        or failed before) a judgement now."""
        rid = rollout.id
        task = st.inflight.get(rid)
        if task is None and rid in st.records and st.records[rid].status == "scored":
            return await self._respond(st.step, st.records[rid])
        if task is None:
            task = asyncio.create_task(self._judge(st, rollout, retried_if_failed))
            st.inflight[rid] = task
            task.add_done_callback(lambda t, st=st, rid=rid: _settled(t, st.inflight.pop(rid, None)))
        record = await asyncio.shield(task)
        return await self._respond(st.step, record)

    async def _judge(self, st: OpenStep, rollout: Rollout, retried_if_failed: bool = False) -> ScoreRecord:
        assert self.session is not None
        key = instance_key(rollout) if self.session.settings.pipeline.per_instance else None
        if key not in st.rubrics:
            st.rubrics[key] = rubric_for(self.run, st.limit, key)
        try:
            record = self.session.policy.score(await score_rollout(self.session.kit, st.rubrics[key], rollout, st.step))
        except BaseException:
            if rollout.id not in st.records:
                st.rollouts.pop(rollout.id, None)  # not judged: it takes no place in the step, but its retry may
                if not st.sealed:
                    st.refused[rollout.id] = rollout
                    st.last_failure = time.monotonic()
            raise
        st.records[rollout.id] = record  # a rollout judged again keeps its place
        if retried_if_failed and record.status == "failed":
            st.retried.add(rollout.id)
            st.last_failure = time.monotonic()
        else:
            st.retried.discard(rollout.id)
        st.journal.append(ScoreEntry(rollout=rollout, record=record))
        if self.analyses is not None:
            self.analyses.scoring()
            self.analyses.start(st.step, rollout, record)
        return record

    async def _answer_closed(self, step: int, rollout: Rollout, explicit_id: bool, st: OpenStep | None) -> ScoreResponse:
        """A rollout for a step that takes no more: a repeat of one it holds (same id and content, e.g. a
        client's retry after a dropped connection) gets its answer; anything else is a conflict."""
        rid = rollout.id
        if explicit_id and st is not None and st.rollouts.get(rid) == rollout:
            task = st.inflight.get(rid)
            record = await asyncio.shield(task) if task is not None else st.records[rid]
            return await self._respond(step, record)
        if explicit_id and st is None:
            stored = self._on_disk(step, artifacts.ROLLOUTS) or {}
            records = self._on_disk(step, artifacts.SCORES) or {}
            if stored.get(rid) == rollout and rid in records:
                return await self._respond(step, records[rid])  # type: ignore[arg-type]
        # Two causes fill a step early: a batch bigger than --rollouts-per-step, or rollouts a crashed trainer
        # left in the step before its resumed run sent the step again.
        overflow = (f"; the server completes a step once it holds {self.options.rollouts_per_step} rollouts "
                    "(--rollouts-per-step): a trainer whose steps have more needs it set to its batch size. Rollouts "
                    "a crashed trainer left in the step count too, unless the resumed trainer drops the step first "
                    "(POST /discard; amaris's adapters do)"
                    if self.options.rollouts_per_step else "")
        if st is not None:
            raise ApiError(409, f"step {step} is being completed: it takes no more rollouts{overflow}", step=step,
                           rollout_id=rid)
        # Else, often a trainer resumed from a checkpoint, which generates steps the crashed run completed again.
        after = max([*artifacts.step_numbers(self.run), *self.steps], default=step) + 1
        left_open = sorted(s for s, held in self.steps.items() if held.state == "open")
        first = (f", once {'steps' if len(left_open) > 1 else 'step'} {', '.join(map(str, left_open))} that it left "
                 "open are completed or dropped (POST /complete, POST /discard)" if left_open else "")
        raise ApiError(409, f"step {step} is complete ({artifacts.rollouts_path(self.run, step)}): it takes no more "
                       f"rollouts{overflow}; a trainer resumed from a checkpoint sends again steps the run holds: "
                       f"number its steps from {after} on (after the run's last step){first}, or give it a run "
                       "directory of its own", step=step, rollout_id=rid)

    async def _respond(self, step: int, record: ScoreRecord) -> ScoreResponse:
        answer = _response(step, record)
        if self.options.lag == 1:  # async: the answer is the score
            return answer
        evolution = await self._evolution_of(step)
        if evolution.state != "done":
            if evolution.state == "idle" or self.stopping.is_set():
                raise ApiError(503, f"the server is stopping before the evolution of step {step} was done; the "
                               "rollout is recorded: send it again (same id) once the server is back", step=step,
                               rollout_id=record.rollout_id)
            raise ApiError(502, f"the evolution of step {step} failed, so there is no re-scored value: "
                           f"{evolution.error}", step=step, rollout_id=record.rollout_id)
        rescored = (self._on_disk(step, artifacts.RESCORES) or {}).get(record.rollout_id)
        if not isinstance(rescored, ScoreRecord):
            return answer  # the step was not updated (or not re-scored): its score is final
        final = _response(step, rescored)
        final.rescored = True
        final.initial = ScoreValue(score=answer.score, rubric_version=answer.rubric_version, status=answer.status,
                                   error=answer.error)
        return final

    def _on_disk(self, step: int, name: str) -> dict[str, Rollout | ScoreRecord] | None:
        """A whole step file by rollout id (None when missing or not as recorded), read once per version
        of the file: every answer of a step may need it."""
        path = artifacts.step_file(self.run, step, name)
        try:
            info = path.stat()
        except FileNotFoundError:
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        cached = self._disk_cache.get((step, name))
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rows: dict[str, Rollout | ScoreRecord] | None = None
        if artifacts.freshness(self.run, step, name).whole:
            if name == artifacts.ROLLOUTS:
                rows = {r.id: r for r in artifacts.load_rollouts(self.run, step)}
            else:
                rows = {r.rollout_id: r for r in artifacts.load_scores(self.run, step, name)}
        self._disk_cache.pop((step, name), None)
        self._disk_cache[(step, name)] = (stamp, rows)
        while len(self._disk_cache) > DISK_CACHE_FILES:  # the oldest first: answers go to recent steps
            del self._disk_cache[next(iter(self._disk_cache))]
        return rows

    async def _evolution_of(self, step: int) -> Evolution:
        """Wait (sync mode) until the step is complete and its evolution has ended."""
        deadline = time.monotonic() + self.options.wait
        while step in self.steps or self.evolutions.running(step):
            if self.stopping.is_set():
                return Evolution(step, state="idle")
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(f"gave up after {self.options.wait:g}s waiting for step {step} to be complete "
                                  "and evolved (sync mode answers with the re-scored value)")
            await self._until(self._change_of(step), left)
        known = self.evolutions.by_step.get(step)
        if known is not None:
            return known
        mark = artifacts.evolution(self.run, step)
        if mark is None:
            self._evolve(step)
            return await self._evolution_of(step)
        return Evolution(step, state=mark.status, error=mark.error)

    # --- completing ------------------------------------------------------------------------------
    async def _auto_complete(self, step: int) -> None:
        try:
            await self.complete(step)
        except Exception as exc:  # noqa: BLE001 - nobody awaits this answer: say it
            self.say(f"step {step}: automatic completion failed: {exc}")

    async def complete(self, step: int, shard: int = 0, shards: int = 1) -> CompleteResponse:
        """Write the step's files and start its evolution; from process `shard` of `shards`, only once every
        shard's /complete has come (a repeated shard changes nothing). The work runs as the server's own
        task, so a client that disconnects (or a retry of the same /complete) never leaves it half done."""
        st = await self._held(step)
        if st is None:
            return self._complete_on_disk(step)
        if shards > 1 or st.shards is not None:
            if st.shards is not None and st.shards != shards:
                raise ApiError(409, f"step {step} is completed by {st.shards} shards (processes), and this /complete "
                               f"says {shards}", step=step)
            if st.shards is None or shard not in st.shards_in:
                st.shards = shards
                st.shards_in.add(shard)
                st.journal.append(ShardEntry(shard=shard, shards=shards))
            missing = st.missing_shards()
            if missing:
                figures = reward_figures(st.records.values())
                return CompleteResponse(step=step, rollouts=len(st.rollouts), scored=figures.scored,
                                        failed=figures.failed, mean_reward=figures.mean,
                                        rubric_versions=sorted({r.rubric_version for r in st.records.values()}),
                                        state=st.state, shards=shards, missing_shards=missing)
        if st.completion is None or st.completion.done():
            st.completion = self._spawn(self._complete(st))
        answer = await asyncio.shield(st.completion)
        return answer.model_copy(update={"shards": st.shards or 1})

    async def _held(self, step: int) -> OpenStep | None:
        """The step if this server holds it open (resuming one a previous server left in its journal)."""
        st = self.steps.get(step)
        if st is None and journal_path(self.run, step).exists() and not artifacts.rollouts_path(self.run, step).exists():
            st = await self._open(step)
        return st

    async def complete_open(self) -> ReferenceComplete | CompleteNoop:
        """The reference's /complete (no body): the current batch, i.e. the oldest step this server holds (a
        trainer that sends step t+1's first rollouts before step t's /complete completes its steps in order).
        Under --rollouts-per-step steps complete themselves, and this is a noop, as in the reference."""
        if self.options.rollouts_per_step:
            return CompleteNoop(rollouts_per_step=self.options.rollouts_per_step)
        held = sorted(self.steps)
        if not held:
            raise ApiError(409, "no step is open: score the step's rollouts first (POST /score)")
        if len(held) > 1:  # a step still being completed is the oldest: a repeated /complete joins its completion
            self.say(f"/complete without a step: steps {', '.join(map(str, held))} are held; completing the oldest, "
                     f"{held[0]}")
        return ReferenceComplete(**(await self.complete(held[0])).model_dump())

    async def discard(self, step: int, *, opened_before: float | None = None) -> DiscardResponse:
        """Drop an open step with its judged rollouts (a crashed trainer's partial batch, to be generated
        again): its journal goes, nothing of it is written to the run. With `opened_before`, only a step
        that opened before then."""
        st = await self._held(step)
        if st is None:
            raise ApiError(409 if artifacts.rollouts_path(self.run, step).exists() else 404,
                           f"step {step} is not open: only an open step can be discarded", step=step)
        if opened_before is not None and st.opened_at is not None and st.opened_at >= opened_before:
            raise ApiError(409, f"step {step} opened at {st.opened_at}, not before {opened_before}: it was opened "
                                "again since the caller saw it open (another process of the trainer discarded that "
                                "one), or `opened_before` was not taken on the server's clock (epoch seconds, "
                                "GET /health's `now`)", step=step)
        if st.state != "open":
            raise ApiError(409, f"step {step} is being completed: it can no longer be discarded", step=step)
        st.begin_completion()  # takes no more rollouts; those being judged are answered as usual
        if st.inflight:
            await asyncio.gather(*list(st.inflight.values()), return_exceptions=True)
        if self.analyses is not None:
            await self.analyses.cancel(step)
        st.journal.remove()
        st.writer.release()
        del self.steps[step]
        self._forget(step)
        st.closed.set()
        self.say(f"step {step}: discarded with its {len(st.records)} judged rollout(s)")
        return DiscardResponse(step=step, discarded=len(st.records))

    async def outage(self, step: int, reason: str) -> CompleteResponse:
        """A step the trainer generated none of whose rollouts reached the server (its requests failed before the
        server took them: it was down or restarting), as the trainer's adapter says, which numbered the step and
        saw them fail. Written with no rollouts, the step evolves as skipped (amaris writes its summary and carries
        the rubric forward), so the steps after it are not refused for a step nobody will send. Nothing is said of
        a step the server holds rollouts of (another process of the trainer reached it: its /complete completes
        it), nor of one whose earlier steps are missing: a trainer that numbers its steps 0, 2, 4 stays refused."""
        held = await self._held(step)
        if held is not None:
            raise ApiError(409, f"step {step} holds {len(held.rollouts)} rollout(s): it reached the server, so it is "
                           "no outage; POST /complete completes it", step=step)
        async with self._opening.setdefault(step, asyncio.Lock()):
            if step in self.steps or artifacts.rollouts_path(self.run, step).exists():
                return self._outage_on_disk(step)
            self._refuse_unscored(step, evolution=True)  # every step before it is there (or held)
            await self._await_served(range(0, VersionRule(lag=self.options.lag).limit(step)), step)
            writer = self._writer(step, self.options.lag)
            try:
                await self._wait_for_version(writer)  # as its rollouts would have been: the run's order holds
                assert self.session is not None
                await writer.write(self.session, [], {"path": OUTAGE_SOURCE, "reason": reason})
            except BaseException as exc:  # the error to report is this one, not a failed write on the way out
                writer.release(type(exc), exc, exc.__traceback__)
                raise
            writer.release()
        self.say(f"step {step}: none of its rollouts reached the server ({reason or 'an outage'}); written with none, "
                 "it evolves as skipped")
        self._evolve(step)
        return CompleteResponse(step=step, rollouts=0, scored=0, failed=0, mean_reward=None, rubric_versions=[],
                                state=self._state(step))

    def _outage_on_disk(self, step: int) -> CompleteResponse:
        """A repeated outage of a step (another process of the trainer said it first): its answer; a step that
        holds rollouts is a 409."""
        if step in self.steps or not artifacts.stored_empty(self.run, step):
            raise ApiError(409, f"step {step} holds rollouts: it reached the server, so it is no outage", step=step)
        return CompleteResponse(step=step, rollouts=0, scored=0, failed=0, mean_reward=None, rubric_versions=[],
                                state=self._state(step), already_complete=True)

    def _forget(self, step: int) -> None:
        """This process asks nothing more for the step."""
        if self.session is not None:
            self.session.kit.forget_training(step)
            if self.session.client.cache is not None:
                self.session.client.cache.forget(step)

    async def _settle(self, st: OpenStep) -> None:
        """Until no judgement of the step is in flight and no failed one awaits its client's retry (at most
        RETRY_GRACE_S after the latest failure): a retry judged meanwhile keeps its place in the step."""
        while True:
            if st.inflight:
                await asyncio.gather(*list(st.inflight.values()), return_exceptions=True)
                continue
            left = st.last_failure + RETRY_GRACE_S - time.monotonic()
            if not (st.retried or st.refused) or left <= 0 or self.stopping.is_set():
                return
            st.retry_came.clear()
            await self._until([st.retry_came], left)

    async def _complete(self, st: OpenStep) -> CompleteResponse:
        step = st.step
        st.begin_completion()
        await self._settle(st)
        if st.refused:  # their retries did not come within the grace: the step is written without them
            self.say(f"step {step}: {len(st.refused)} rollout(s) the endpoint refused to judge were not sent again "
                     f"within {RETRY_GRACE_S:g}s; the step is written without them")
            st.refused.clear()
        if not st.records:
            st.state = "open"
            st.completing.clear()
            raise ApiError(409, f"step {step}: no rollout has been judged yet, so there is nothing to complete",
                           step=step)
        st.sealed = True  # no retry is judged into it any more
        st.journal.append(CompleteEntry())
        outcome = await self._write_step(st.writer, st, st.training)
        st.journal.close()
        del self.steps[step]
        if self._completed_last is None or step > self._completed_last[0]:  # a client's retry is answered from it
            self._completed_last = (step, st.rollouts, time.monotonic())

        async def hand_over() -> None:
            """The step's lock goes to its evolution once the step's analyses are in calls.jsonl."""
            try:
                if self.analyses is not None:
                    await self.analyses.settle(step)
            finally:
                st.writer.release()
                self._forget(step)

        self._evolve(step, before=hand_over)
        st.closed.set()  # after the evolution is registered: a waiter then finds it running
        self.say(completed_line(outcome))
        return CompleteResponse(step=step, rollouts=outcome.total, scored=outcome.done, failed=outcome.failed,
                                mean_reward=outcome.mean_reward, rubric_versions=outcome.rubric_versions,
                                state=self._state(step))

    async def _write_step(self, writer: StepWriter, judged: JournalState | OpenStep,
                          training: TrainingMetadata | None) -> StageOutcome:
        """rollouts.jsonl and scores.jsonl with their provenance (and training.json when the step's requests
        said something about training), by the step writer `score` uses, from the journaled records (no
        request is sent again)."""
        assert self.session is not None
        rollouts = [judged.rollouts[rid] for rid in judged.records]  # journal order
        sent = SentTraining(training, SOURCE) if training is not None else None
        return await writer.write(self.session, rollouts, SOURCE, known=judged.records, training=sent)

    def _complete_on_disk(self, step: int) -> CompleteResponse:
        if not self._files_written(step):
            raise ApiError(409, f"step {step} has no rollouts: nothing to complete", step=step)
        scores = artifacts.load_scores(self.run, step)
        if artifacts.evolution(self.run, step) is None and not self.evolutions.running(step) \
                and locks.holder(self.run.step_lock_path(step)) is None:
            self._evolve(step)
        figures = reward_figures(scores)
        return CompleteResponse(step=step, rollouts=figures.n, scored=figures.scored, failed=figures.failed,
                                mean_reward=figures.mean, rubric_versions=sorted({s.rubric_version for s in scores}),
                                state=self._state(step), already_complete=True)

    def _evolve(self, step: int, before: Callable[[], Awaitable[None]] | None = None) -> None:
        def finished(evolution: Evolution) -> None:
            if evolution.state == "done":
                updated = artifacts.evolution(self.run, step)
                note = f"; rubric version {step + 1} written" if updated and updated.update else ""
                if updated and updated.skipped:  # as `evolve` warns: the outage is not to pass unseen
                    note = (f", as skipped: the step was not evaluated ({updated.skipped})" + (
                        f"; rubric version {step + 1} carries the one before it forward unchanged" if updated.update else ""))
                rescores = artifacts.scores_path(self.run, step, artifacts.RESCORES)
                if updated and updated.rescore and rescores.exists():  # sync mode: what the trainer was answered
                    figures = reward_figures(artifacts.load_scores(self.run, step, artifacts.RESCORES))
                    if figures.failed:
                        note += (f"; {figures.failed} of {figures.n} re-scored rollouts could not be judged (answered "
                                 "as failed, with the failure policy's reward)")
                self.say(f"step {step}: evolution done{note}")
                for alarm in alarms_at(RunReader(self.run), step):
                    kind = alarm.kind + (f" ({alarm.pattern})" if alarm.pattern else "")
                    self.say(f"alarm: step {alarm.step}, {kind}: {alarm.reason}")
                Journal(journal_path(self.run, step)).remove()
                log_path(self.run, step).unlink(missing_ok=True)  # kept only when it failed
            elif evolution.state == "failed":
                self.say(f"step {step}: evolution failed: {evolution.error}")

        self.evolutions.start(step, finished, before=before)

    # --- status ----------------------------------------------------------------------------------
    def _state(self, step: int) -> StepState:
        if step in self.steps:
            return self.steps[step].state
        if self.evolutions.running(step) or (locks.holder(self.run.step_lock_path(step)) is not None
                                             and artifacts.rollouts_path(self.run, step).exists()):
            return "evolving"
        mark = artifacts.evolution(self.run, step)
        if mark is not None:
            return mark.status
        if artifacts.rollouts_path(self.run, step).exists():
            return "idle"
        raise ApiError(404, f"step {step} has no rollouts in {self.run.path}", step=step)

    def latest_complete(self) -> int:
        steps = [s for s in artifacts.steps_with_rollouts(self.run) if s not in self.steps]
        if not steps:
            raise ApiError(404, "no step is complete yet: POST /complete first", step=None)
        return steps[-1]

    def status(self, step: int | None) -> RubricStatus:
        step = self.latest_complete() if step is None else step
        state = self._state(step)
        versions = self.run.rubric_versions()
        status = RubricStatus(step=step, state=state, latest_version=versions[-1] if versions else None)
        if state == "evolving":  # an evolution waits for the steps before it: say so when one of them never comes
            try:
                self._refuse_unscored(step, evolution=True)
            except OutOfOrder as blocked:
                status.blocked = str(blocked)
        if state in ("done", "failed"):
            mark = artifacts.evolution(self.run, step)
            if mark is not None:
                status.updated = mark.update and mark.status == "done"
                status.rubric_version = step + 1 if status.updated else None
                status.error = mark.error
                status.skipped = mark.skipped
            status.alarms = [a for a in run_alarms(self.run, self._alarm_signals).alarms if a.step <= step]
            if state == "failed" and status.error is None and step in self.evolutions.by_step:
                status.error = self.evolutions.by_step[step].error
        return status

    async def wait_status(self, step: int | None, timeout: float) -> RubricStatus:
        """The step's status once its evolution has ended (or `timeout` seconds, then `timed_out`). Steps
        this server drives wake the wait by their events; an evolution another process runs is seen on disk."""
        step = self.latest_complete() if step is None else step
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(step)
            if status.state in ("done", "failed", "idle"):
                return status
            if status.blocked:  # its evolution waits on a step nobody sends: a 409 now, not a 503 after --wait
                raise OutOfOrder(status.blocked)
            if self.stopping.is_set():
                raise ApiError(503, "the server is stopping", step=step)
            left = deadline - time.monotonic()
            if left <= 0:
                status.timed_out = True
                return status
            events = self._change_of(step)
            await self._until(events, left if events else min(left, OTHER_PROCESS_POLL_S))

    async def wait_updated(self) -> ReferenceRubricStatus:
        """The reference's wait (no query): until every update of the latest complete step is done. Its answer
        says "updated" only then: an evolution that failed is a 502, one that does not end within --wait a
        503, so that a client written for the reference never goes on as if the rubric were updated."""
        assert self.session is not None
        step = self.latest_complete()
        status = await self.wait_status(step, self.options.wait)
        if status.timed_out:
            raise ApiError(503, f"gave up after {self.options.wait:g}s waiting for the evolution of step {step}",
                           step=step)
        if status.state == "failed":
            raise ApiError(502, f"the evolution of step {step} failed: {status.error}", step=step)
        if status.state != "done":
            raise ApiError(409, f"step {step} is complete but no evolution runs for it (state {status.state}): "
                           f"restart the server or run `amaris evolve --run {self.run.path} --step {step}`", step=step)
        mode = "per_instance" if self.session.settings.pipeline.per_instance else "global"
        return ReferenceRubricStatus(**status.model_dump(), mode=mode)

    def health(self) -> Health:
        return Health(status="stopping" if self.stopping.is_set() else "ok", run=str(self.run.path),
                      mode=self.options.mode.value, lag=self.options.lag,
                      rollouts_per_step=self.options.rollouts_per_step,
                      open_steps=sorted(self.steps), open=[self.steps[s].status() for s in sorted(self.steps)],
                      version=__version__, now=time.time())


def _recent(tries_by_request: dict[str, list[tuple[float, T]]]) -> dict[str, list[tuple[float, T]]]:
    """The tries (monotonic time, what they left) of each OpenRLHF request made within RETRY_MEMORY_S: its retry
    comes within its 5 tries; an equal body later is another sample's."""
    now = time.monotonic()
    return {key: kept for key, tries in tries_by_request.items()
            if (kept := [t for t in tries if now - t[0] < RETRY_MEMORY_S])}


def _settled(task: asyncio.Task[Any], _: object = None) -> None:
    """Take a finished judgement's exception: every client that waited for it may have gone (it is reported
    to those that did), and asyncio would otherwise log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _differences(recorded: Any, current: Any, where: str = "") -> list[str]:
    """Dotted paths where two JSON values differ (`policy.on_error`, `agents.scorer.settings.model`)."""
    if isinstance(recorded, dict) and isinstance(current, dict):
        return [path for key in sorted({*recorded, *current}, key=str)
                for path in _differences(recorded.get(key), current.get(key), f"{where}.{key}" if where else str(key))]
    return [] if recorded == current else [where or "settings"]


def _free_id(base: str, taken: dict[str, Rollout]) -> str:
    """A content id made unique within the step as a file's would be: base, base-2, base-3, ..."""
    n, candidate = 1, base
    while candidate in taken:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _response(step: int, record: ScoreRecord) -> ScoreResponse:
    return ScoreResponse(score=record.reward, id=record.rollout_id, step=step, rubric_version=record.rubric_version,
                         status=record.status, error=record.error, instance_id=record.instance_id)


def is_explicit(rollout: Rollout) -> bool:
    """Whether the rollout's id was given (else it is the content id a file line without one gets)."""
    return rollout.id != content_id(rollout)


def completed_line(outcome: StageOutcome) -> str:
    """What the server says of a step it completed; its mean as `inspect` and the report show it (a mean of
    0.3125 is 0.313 there, and was 0.312 here)."""
    mean = f", mean reward {shown_number(outcome.mean_reward)}" if outcome.mean_reward is not None else ""
    failed = f", {outcome.failed} failed" if outcome.failed else ""
    return f"step {outcome.step}: complete ({outcome.total} rollouts{mean}{failed}); evolving in the background"
