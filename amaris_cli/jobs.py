"""amaris's Python API: one function per pipeline command, taking that command's options object
(options.py) whole, as the CLI does.

    from amaris_cli.jobs import score_job
    from amaris_cli.options import ScoreOptions
    result = score_job(ScoreOptions(rollouts=Path("step-3.jsonl"), run=Path("runs/x"), step=3, lag=1))
    result.outcome.mean_reward, result.failure   # failure: records that failed under --on-error fail

Each job takes the locks it needs, resolves the run's settings once (the run's config < the environment
< the options' flag layer), opens the session and the memory, runs the stages, and returns what
happened. Some records failing under `fail` is a result (`failure`), not an exception; an error that
stops a command is an AmarisError. Printing is the CLI's (commands.py); a job speaks only through its
hooks (`say` carries what a person must see while it runs: a wait for another process, the sim-judge).

Who locks what (locks.py): `score`, `analyze`, `summarize`, `update`, `evolve` and `loop` hold the
lock of the step they write. `evolve` and `analyze` wait while a `score` of their step holds it;
any other holder is a second writer of the same step: exit 3 with its command line. Writers of the
embedded memory wait for its lock; readers take none.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amaris_cli import artifacts, locks
from amaris_cli.config import Settings, deep_merge
from amaris_cli.errors import InputError, InputErrors
from amaris_cli.eventloop import blocking
from amaris_cli.export import rewards_bytes
from amaris_cli.jsonio import write_bytes_atomic
from amaris_cli.llm.client import AgentUsage
from amaris_cli.options import (
    AnalyzeOptions,
    EvolveOptions,
    LoopOptions,
    Options,
    ScoreOptions,
    StageOptions,
    SummarizeOptions,
    UpdateOptions,
)
from amaris_cli.policy import StageFailure, recorded_layer
from amaris_cli.rundir import RunDir
from amaris_cli.schedule import earlier_steps, update_decided, wait_for_evolutions
from amaris_cli.session import Session, open_session, run_settings
from amaris_cli.stages.common import StageOutcome
from amaris_cli.stages.writer import StepWriter, VersionRule

if TYPE_CHECKING:  # each job imports the stages it runs, so `score` does not load the evolution's modules
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.stages.evolve import EvolveOutcome
    from amaris_cli.stages.loop import StepPlan, StepReport
    from amaris_cli.stages.update import UpdateOutcome

Say = Callable[[str], None]


def _silent(*_: object) -> None:
    return None


@dataclass(frozen=True)
class Hooks:
    """What a job tells its caller while it runs: `say` a message a person must see, `on_stage(stage, step)`
    as a stage starts, `on_record(record)` as each rollout of a per-rollout stage finishes, `on_step(report)`
    as each step of a loop or replay ends."""

    say: Say = _silent
    on_stage: Callable[[str, int], None] = _silent
    on_record: Callable[[Any], None] = _silent
    on_step: Callable[[Any], None] = _silent


@dataclass
class JobResult:
    usage: dict[str, AgentUsage] = field(default_factory=dict)
    wall_s: float = 0.0
    sim: bool = False
    failure: StageFailure | None = None  # some records failed under `fail`: everything else is written


@dataclass
class ScoreResult(JobResult):
    outcome: StageOutcome | None = None
    rubric_version: int = 0
    scores_path: Path | None = None
    rewards_path: Path | None = None


@dataclass
class StageResult(JobResult):
    outcome: Any = None


@dataclass
class EvolveResult(JobResult):
    outcome: EvolveOutcome | None = None
    update: bool = False


@dataclass
class LoopResult(JobResult):
    reports: list[StepReport] = field(default_factory=list)


@contextmanager
def _session(run: RunDir, settings: Settings, options: Options, hooks: Hooks) -> Iterator[Session]:
    with open_session(run, settings, options.judge.value, flags=options.config_layer(),  # type: ignore[attr-defined]
                      announce=hooks.say) as session:
        yield session


def _stage_settings(run: RunDir, options: StageOptions) -> Settings:
    """A stage after scoring works under the failure policy the step was scored under, unless it is given
    one: the background `evolve` of a step scored with `--on-error neutral` does not fail on its gaps."""
    return run_settings(run, deep_merge(recorded_layer(run, options.step), options.config_layer()))


@contextmanager
def _stage_lock(run: RunDir, step: int, role: str, wait: float, say: Say) -> Iterator[None]:
    """The step's lock for a stage after scoring: waits while a `score` of the step holds it. Its holder keeps the
    step's provenance in memory (artifacts.held)."""
    with locks.step(run.path, step, role, wait=wait, on_wait=say, wait_for=("score",) if wait > 0 else None), \
            artifacts.held(run, step):
        yield


@contextmanager
def memory_opener(session: Session, wait: float, say: Say) -> Iterator[Callable[[], Awaitable[MemoryStore]]]:
    """An opener of the memory for writing (taking its lock, waiting up to `wait`) that opens it at most
    once, on first use, and closes it when the job ends."""
    from amaris_cli.memory.store import MemoryStore  # chromadb: only for the commands that write the memory

    opened: list[MemoryStore] = []

    async def open_store() -> MemoryStore:
        if not opened:
            # In eventloop.blocking: Ctrl-C ends a wait for another writer's lock at once (in a bare thread the
            # command went on waiting, up to `wait`, after Ctrl-C)
            opened.append(await blocking(lambda stop: MemoryStore.open(
                session.run, session.settings.memory, "writer", wait=wait, say=say, replaying=session.replaying,
                offline=session.offline, stop=stop, outage_budget=session.settings.llm.outage_budget)))
        return opened[0]

    try:
        yield open_store
    finally:
        for store in opened:
            store.close()


def _finish(result: JobResult, session: Session, started: float) -> None:
    result.usage = session.client.usage
    result.wall_s = round(time.monotonic() - started, 3)
    result.sim = session.sim_url is not None


def score_job(options: ScoreOptions, hooks: Hooks = Hooks()) -> ScoreResult:
    from amaris_cli.llm.wire import preload_sdk, skip_final_collection
    from amaris_cli.rollouts import parse_mapping, read_rollout_file

    preload_sdk()  # overlaps with reading the rollouts (a pipe, maybe) and any wait for the rubric version
    skip_final_collection()  # the trainer waits for this process to exit
    started = time.monotonic()
    run, step = RunDir(options.run), options.step
    settings = run_settings(run, options.config_layer())
    # Read (once: it may be a pipe) and validate everything before the run is touched.
    loaded = read_rollout_file(options.rollouts, parse_mapping(options.map or []), settings.pipeline.instance_field)
    if said := sorted({r.step for r in loaded.rollouts if r.step is not None and r.step != step}):
        # A trainer's own numbering (verl counts from 1) or a wrong file: either way --step decides, said once.
        hooks.say(f"{options.rollouts}: its rollouts say step {', '.join(map(str, said[:5]))}{', ...' if len(said) > 5 else ''}; "
                  f"they are scored and stored as step {step}, as --step says")
    rollouts = [r.model_copy(update={"step": step}) for r in loaded.rollouts]
    source = {"path": str(options.rollouts), "sha256": loaded.sha256}
    result = ScoreResult(scores_path=artifacts.scores_path(run, step), rewards_path=options.rewards)
    rule = VersionRule(lag=options.lag, rubric_version=options.rubric_version)
    with StepWriter(run, step, rule, role="score", say=hooks.say, wait=options.wait) as writer, \
            _session(run, settings, options, hooks) as session:
        outcome = session.execute(writer.write(session, rollouts, source, force=options.force, on_done=hooks.on_record))
        _finish(result, session, started)
    result.outcome, result.rubric_version = outcome, writer.version or 0
    if options.rewards is not None:
        write_bytes_atomic(options.rewards, rewards_bytes(run, step, options.rewards_format.value))
    result.failure = session.policy.failure("score", step, outcome.failed, outcome.total, outcome.errors)
    return result


def analyze_job(options: AnalyzeOptions, hooks: Hooks = Hooks()) -> StageResult:
    from amaris_cli.stages.analyze import analyze_step
    from amaris_cli.stages.evolve import require_scores

    started, run, step, result = time.monotonic(), RunDir(options.run), options.step, StageResult()
    settings = _stage_settings(run, options)
    with _stage_lock(run, step, "analyze", options.wait, hooks.say), _session(run, settings, options, hooks) as session:
        require_scores(session, step)
        outcome = session.execute(analyze_step(session, step, force=options.force, on_done=hooks.on_record))
        _finish(result, session, started)
    result.outcome = outcome
    result.failure = session.policy.failure("analyze", step, outcome.failed, outcome.total, outcome.errors)
    return result


@contextmanager
def _memory_stage(options: StageOptions, role: str, hooks: Hooks,
                  before: Callable[[], None] | None = None) -> Iterator[tuple[Session, Callable[[], Any]]]:
    """The step's lock, the session and the memory opener of a stage that writes the memory (`before` runs
    once the lock is held, before the session starts). Under `fail`, a step with failed scores or analyses
    goes no further."""
    from amaris_cli.stages.evolve import require_analyses, require_scores

    run = RunDir(options.run)
    settings = _stage_settings(run, options)
    with ExitStack() as stack:
        stack.enter_context(_stage_lock(run, options.step, role, options.wait, hooks.say))
        if before is not None:
            before()
        session = stack.enter_context(_session(run, settings, options, hooks))
        require_scores(session, options.step)
        require_analyses(session, options.step)  # the memory opens only when first used, after these
        yield session, stack.enter_context(memory_opener(session, options.wait, hooks.say))


def summarize_job(options: SummarizeOptions, hooks: Hooks = Hooks()) -> StageResult:
    from amaris_cli.stages.summarize import summarize_step

    started, result = time.monotonic(), StageResult()
    with _memory_stage(options, "summarize", hooks) as (session, memory):
        async def run_it() -> StageOutcome:
            return await summarize_step(session, options.step, await memory(), force=options.force)

        result.outcome = session.execute(run_it())
        _finish(result, session, started)
    return result


def update_job(options: UpdateOptions, hooks: Hooks = Hooks()) -> StageResult:
    from amaris_cli.stages.update import update_step

    started, result = time.monotonic(), StageResult()
    run, step = RunDir(options.run), options.step

    def earlier_evolved() -> None:
        wait_for_evolutions(run, earlier_steps(run, step), wait=options.wait, say=hooks.say,
                            needed_for=f"the update of step {step}", fail_if_idle=True)

    with _memory_stage(options, "update", hooks, earlier_evolved) as (session, memory):
        async def run_it() -> UpdateOutcome:
            return await update_step(session, step, await memory(), force=options.force)

        result.outcome = session.execute(run_it())
        artifacts.mark_evolved(run, step, artifacts.Evolution(status="done", update=True, **session.how.recorded()))
        _finish(result, session, started)
    return result


class _MemoryPreload:
    """Import ChromaDB and load the local embedding model in a background thread: 2-6 s on a 2-core machine,
    which would otherwise come between the query generator's answer and the updater's request. Started when
    `evolve` waits for its step's lock (the `score` of the step holds it; `amaris serve` starts each step's
    evolution when the step opens) or, at the latest, when the summary starts: it then overlaps with a wait
    or with the summary's and the queries' requests, never with the command's first request."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.started = False

    def start(self) -> None:
        if not self.started:
            self.started = True
            _preload_memory(self.settings)


def _preload_memory(settings: Settings) -> None:
    from amaris_cli import preload

    def load() -> None:
        try:
            import chromadb  # noqa: F401

            from amaris_cli.memory.embeddings import cache_directory, make_embedder

            if settings.memory.embedding == "local" and cache_directory() is None:  # with a cache: on a miss
                make_embedder(settings.memory)
        except Exception:  # noqa: BLE001 - the memory loads them again when it is opened and reports the error
            pass

    preload.ahead(load)


def evolve_job(options: EvolveOptions, hooks: Hooks = Hooks()) -> EvolveResult:
    from amaris_cli.llm.wire import preload_sdk
    from amaris_cli.stages.evolve import evolve_step

    preload_sdk()  # overlaps with waiting for the score of this step and for earlier evolutions
    started, run, step, result = time.monotonic(), RunDir(options.run), options.step, EvolveResult()
    settings = _stage_settings(run, options)
    preload = _MemoryPreload(settings)

    def waiting(text: str) -> None:
        preload.start()
        hooks.say(text)

    def on_stage(stage: str, at: int) -> None:
        if stage == "summarize":
            preload.start()
        hooks.on_stage(stage, at)

    with ExitStack() as stack:
        stack.enter_context(_stage_lock(run, step, "evolve", options.wait, waiting))
        session = stack.enter_context(_session(run, settings, options, hooks))
        memory = stack.enter_context(memory_opener(session, options.wait, hooks.say))
        result.update = update_decided(run, step, settings.pipeline, options.update)
        try:
            result.outcome = session.execute(evolve_step(
                session, step, memory, update=result.update, rescore=options.rescore, wait=options.wait,
                force=options.force, on_stage=on_stage, on_record=hooks.on_record))
        finally:
            _finish(result, session, started)
    return result


def parse_step_range(text: str | None) -> tuple[int | None, int | None]:
    from amaris_cli.errors import ConfigError

    if not text:
        return None, None
    start, sep, end = text.partition(":")
    try:
        lo = int(start) if start else None
        hi = int(end) if end else None
        if not sep:
            hi = lo
    except ValueError:
        raise ConfigError(f"--steps {text!r}: expected START:END, START: or :END (inclusive)") from None
    return lo, hi


def loop_plans(options: LoopOptions, settings: Settings) -> dict[int, StepPlan]:
    """Every selected step's rollouts, validated before the run is touched; each input is read once
    (it may be a pipe) and the hash of those bytes is what provenance records."""
    from amaris_cli.rollouts import group_by_step, parse_mapping, read_rollout_file
    from amaris_cli.stages.loop import StepPlan
    from amaris_cli.stepfiles import step_files

    source, mapping = options.source, parse_mapping(options.map or [])
    lo, hi = parse_step_range(options.steps)
    instance_field = settings.pipeline.instance_field
    discovered: dict[int, Path | tuple[list[Any], str]]
    if source.is_dir():
        discovered = dict(step_files(source))
    else:
        whole = read_rollout_file(source, mapping, instance_field, step_required=True)
        discovered = {s: (rows, whole.sha256) for s, rows in group_by_step(whole.rollouts, source).items()}
    selected = {s: v for s, v in discovered.items() if (lo is None or s >= lo) and (hi is None or s <= hi)}
    if not selected:
        raise InputError(source, f"no steps in range {options.steps!r} (found {', '.join(map(str, discovered)) or 'none'})")
    plans: dict[int, StepPlan] = {}
    errors: list[InputError] = []
    for step, src in selected.items():
        if isinstance(src, Path):
            try:
                loaded = read_rollout_file(src, mapping, instance_field, default_step=step)
            except InputErrors as exc:
                errors.extend(exc.errors)
                continue
            except InputError as exc:
                errors.append(exc)
                continue
            rows, where, sha = loaded.rollouts, src, loaded.sha256
        else:
            (rows, sha), where = src, source
        plans[step] = StepPlan(rollouts=[r.model_copy(update={"step": step}) for r in rows],
                               source={"path": str(where), "sha256": sha}, lag=options.lag, rescore=options.rescore)
    if errors:
        raise InputErrors(errors)
    return plans


def loop_job(options: LoopOptions, hooks: Hooks = Hooks()) -> LoopResult:
    from amaris_cli.stages.loop import run_loop

    started, run, result = time.monotonic(), RunDir(options.run), LoopResult()
    settings = run_settings(run, options.config_layer())
    plans = loop_plans(options, settings)
    with ExitStack() as stack:
        session = stack.enter_context(_session(run, settings, options, hooks))
        memory = stack.enter_context(memory_opener(session, options.wait, hooks.say))

        async def run_it() -> list[StepReport]:
            # The memory is opened when the first evolution needs it, not before: until then the loop may
            # wait for an evolution of an earlier step that another process runs, and that one needs it.
            return await run_loop(session, plans, memory, hooks=hooks, wait=options.wait)

        try:
            result.reports = session.execute(run_it())
        finally:
            _finish(result, session, started)
    return result

