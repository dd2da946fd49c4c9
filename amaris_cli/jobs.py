"""What each pipeline command does: take the locks it needs, open the session and the memory, run
the stages, and return what happened. Printing is the CLI's (commands.py); nothing here prints
except through the `say` callback, which carries messages a person must see while it runs
(waiting for another process, the sim-judge in use).

Who locks what (locks.py): `score`, `analyze`, `summarize`, `update`, `evolve` and `loop` hold the
lock of the step they write. `evolve` and `analyze` wait while a `score` of their step holds it;
any other holder is a second writer of the same step: exit 3 with its command line. Writers of the
embedded memory wait for its lock; readers take none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amaris_cli import artifacts, locks
from amaris_cli.config import Settings, load_settings
from amaris_cli.errors import InputError, InputErrors, StageFailed
from amaris_cli.export import rewards_bytes
from amaris_cli.jsonio import write_bytes_atomic
from amaris_cli.llm.client import AgentUsage
from amaris_cli.policy import FailurePolicy
from amaris_cli.rundir import RunDir
from amaris_cli.schedule import earlier_steps, scoring_limit, scoring_version, update_due, wait_for_evolutions
from amaris_cli.session import JudgeChoice, Session, open_session
from amaris_cli.stages.common import StageOutcome, store_rollouts

if TYPE_CHECKING:  # each job imports the stages it runs, so `score` does not load the evolution's modules
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.stages.evolve import EvolveOutcome
    from amaris_cli.stages.loop import StepPlan, StepReport
    from amaris_cli.stages.update import UpdateOutcome

Say = Callable[[str], None]
Hook = Callable[..., None]
DEFAULT_WAIT_S = 3600.0


@dataclass
class JobResult:
    usage: dict[str, AgentUsage] = field(default_factory=dict)
    wall_s: float = 0.0
    sim: bool = False


@dataclass
class ScoreResult(JobResult):
    outcome: StageOutcome | None = None
    rubric_version: int = 0
    scores_path: Path | None = None
    rewards_path: Path | None = None


def _settings(run: RunDir, flags: dict[str, Any]) -> Settings:
    run.require()
    return load_settings(base=run.load_manifest().config, flags=flags, source=str(run.manifest_path))


def _step_lock(run: RunDir, step: int, role: str, wait: float = 0.0, say: Say | None = None) -> Any:
    waits_for = ("score",) if wait > 0 else None
    return locks.exclusive(run.step_lock_path(step), f"step {step} of {run.path}", role=role, wait=wait,
                           on_wait=say, wait_for=waits_for)


@contextmanager
def _memory(session: Session, wait: float, say: Say) -> Iterator[Callable[[], Any]]:
    """An opener of the memory for writing (taking its lock, waiting up to `wait`) that opens it at most
    once, on first use, and closes it when the job ends."""
    from amaris_cli.memory.store import MemoryStore

    opened: list[MemoryStore] = []

    async def open_store() -> MemoryStore:
        if not opened:
            opened.append(await asyncio.to_thread(MemoryStore.open, session.run, session.settings.memory, "writer",
                                                  wait=wait, say=say))
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


def score_job(rollouts_file: Path, run_path: Path, step: int, *, mapping: dict[str, str], rubric_version: int | None,
              lag: int, on_error: str | None, force: bool, judge: JudgeChoice, flags: dict[str, Any], wait: float,
              rewards_out: Path | None, rewards_format: str, say: Say, on_record: Hook | None = None) -> ScoreResult:
    from amaris_cli.llm.wire import preload_sdk, skip_final_collection
    from amaris_cli.rollouts import read_rollout_file
    from amaris_cli.stages.score import score_step

    preload_sdk()  # overlaps with reading the rollouts (a pipe, maybe) and any wait for the rubric version
    skip_final_collection()  # the trainer waits for this process to exit
    started = time.monotonic()
    run = RunDir(run_path)
    settings = _settings(run, flags)
    policy = FailurePolicy.resolve(on_error, settings)
    # Read (once: it may be a pipe) and validate everything before the run is touched.
    loaded = read_rollout_file(rollouts_file, mapping, settings.pipeline.instance_field)
    rollouts = [r.model_copy(update={"step": step}) for r in loaded.rollouts]
    source = {"path": str(rollouts_file), "sha256": loaded.sha256}
    result = ScoreResult(scores_path=artifacts.scores_path(run, step), rewards_path=rewards_out)
    with _step_lock(run, step, "score"):
        version = scoring_version(run, step, lag, rubric_version, wait=wait, say=say)
        with open_session(run, flags, judge, announce=say) as session:
            store_rollouts(run, step, rollouts, source, force, session.how)
            limit = rubric_version if rubric_version is not None else scoring_limit(step, lag)
            outcome, _ = session.execute(score_step(session, step, rollouts, limit=limit, lag=lag,
                                                    explicit_version=rubric_version, policy=policy, on_done=on_record))
            _finish(result, session, started)
    result.outcome, result.rubric_version = outcome, version
    if rewards_out is not None:
        write_bytes_atomic(rewards_out, rewards_bytes(run, step, rewards_format))
    _check(policy, "score", step, outcome, result)
    return result


def _check(policy: FailurePolicy, stage: str, step: int, outcome: StageOutcome, result: JobResult) -> None:
    try:
        policy.check(stage, step, outcome.failed, outcome.total, outcome.errors)
    except StageFailed as exc:
        exc.result = result
        raise


@dataclass
class StageResult(JobResult):
    outcome: Any = None


def analyze_job(run_path: Path, step: int, *, on_error: str | None, force: bool, judge: JudgeChoice,
                flags: dict[str, Any], wait: float, say: Say, on_record: Hook | None = None) -> StageResult:
    from amaris_cli.stages.analyze import analyze_step
    from amaris_cli.stages.evolve import require_scores

    started = time.monotonic()
    run = RunDir(run_path)
    policy = FailurePolicy.resolve(on_error, _settings(run, flags))
    result = StageResult()
    with _step_lock(run, step, "analyze", wait, say), open_session(run, flags, judge, announce=say) as session:
        require_scores(session, step, policy)
        result.outcome = session.execute(analyze_step(session, step, force=force, on_done=on_record))
        _finish(result, session, started)
    _check(policy, "analyze", step, result.outcome, result)
    return result


def _require_whole_step(session: Session, step: int, policy: FailurePolicy) -> None:
    """What `evolve` checks before it summarizes: under `fail`, no failed scores or analyses."""
    from amaris_cli.stages.evolve import require_analyses, require_scores

    require_scores(session, step, policy)
    require_analyses(session, step, policy)


@contextmanager
def _memory_stage(run: RunDir, step: int, role: str, flags: dict[str, Any], judge: JudgeChoice, wait: float,
                  say: Say, before: Callable[[], None] | None = None) -> Iterator[tuple[Session, Callable[[], Any]]]:
    """The step's lock, the session and the memory opener of a stage that writes the memory (`before` runs
    once the lock is held, before the session starts)."""
    with ExitStack() as stack:
        stack.enter_context(_step_lock(run, step, role, wait, say))
        if before is not None:
            before()
        session = stack.enter_context(open_session(run, flags, judge, announce=say))
        yield session, stack.enter_context(_memory(session, wait, say))


def summarize_job(run_path: Path, step: int, *, force: bool, judge: JudgeChoice, flags: dict[str, Any], wait: float,
                  say: Say, on_error: str | None = None) -> StageResult:
    from amaris_cli.stages.summarize import summarize_step

    started, run, result = time.monotonic(), RunDir(run_path), StageResult()
    policy = FailurePolicy.resolve(on_error, _settings(run, flags))
    with _memory_stage(run, step, "summarize", flags, judge, wait, say) as (session, memory):
        _require_whole_step(session, step, policy)  # the memory opens only when first used, after this

        async def run_it() -> StageOutcome:
            return await summarize_step(session, step, await memory(), force=force)

        result.outcome = session.execute(run_it())
        _finish(result, session, started)
    return result


def update_job(run_path: Path, step: int, *, force: bool, judge: JudgeChoice, flags: dict[str, Any], wait: float,
               say: Say, on_error: str | None = None) -> StageResult:
    from amaris_cli.stages.update import update_step

    started, run, result = time.monotonic(), RunDir(run_path), StageResult()
    policy = FailurePolicy.resolve(on_error, _settings(run, flags))

    def earlier_evolved() -> None:
        wait_for_evolutions(run, earlier_steps(run, step), wait=wait, say=say,
                            needed_for=f"the update of step {step}", fail_if_idle=True)

    with _memory_stage(run, step, "update", flags, judge, wait, say, earlier_evolved) as (session, memory):
        _require_whole_step(session, step, policy)

        async def run_it() -> UpdateOutcome:
            return await update_step(session, step, await memory(), force=force)

        result.outcome = session.execute(run_it())
        how = session.how
        artifacts.mark_evolved(run, step, artifacts.Evolution(status="done", update=True, flags=how.flags,
                                                              judge=how.judge))
        _finish(result, session, started)
    return result


@dataclass
class EvolveResult(JobResult):
    outcome: EvolveOutcome | None = None
    update: bool = False


def evolve_job(run_path: Path, step: int, *, update: bool | None, rescore: bool, on_error: str | None, force: bool,
               judge: JudgeChoice, flags: dict[str, Any], wait: float, say: Say,
               on_stage: Hook | None = None, on_record: Hook | None = None) -> EvolveResult:
    from amaris_cli.llm.wire import preload_sdk
    from amaris_cli.stages.evolve import evolve_step

    preload_sdk()  # overlaps with waiting for the score of this step and for earlier evolutions
    started = time.monotonic()
    run = RunDir(run_path)
    settings = _settings(run, flags)
    policy = FailurePolicy.resolve(on_error, settings)
    result = EvolveResult()
    with ExitStack() as stack:
        stack.enter_context(_step_lock(run, step, "evolve", wait, say))
        session = stack.enter_context(open_session(run, flags, judge, announce=say))
        memory = stack.enter_context(_memory(session, wait, say))
        result.update = update if update is not None else update_due(run, step, settings.pipeline.update_every)
        try:
            result.outcome = session.execute(evolve_step(
                session, step, memory, update=result.update, rescore=rescore, policy=policy, wait=wait,
                force=force, on_stage=on_stage, on_record=on_record))
        finally:
            _finish(result, session, started)
    return result


@dataclass
class LoopResult(JobResult):
    reports: list[StepReport] = field(default_factory=list)


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


def loop_plans(source: Path, run: RunDir, step_range: str | None, mapping: dict[str, str], settings: Settings,
               lag: int, rescore: bool) -> dict[int, StepPlan]:
    """Every selected step's rollouts, validated before the run is touched; each input is read once
    (it may be a pipe) and the hash of those bytes is what provenance records."""
    from amaris_cli.rollouts import group_by_step, read_rollout_file
    from amaris_cli.stages.loop import StepPlan
    from amaris_cli.stepfiles import step_files

    lo, hi = parse_step_range(step_range)
    instance_field = settings.pipeline.instance_field
    discovered: dict[int, Path | tuple[list[Any], str]]
    if source.is_dir():
        discovered = dict(step_files(source))
    else:
        whole = read_rollout_file(source, mapping, instance_field)
        discovered = {s: (rows, whole.sha256) for s, rows in group_by_step(whole.rollouts, source).items()}
    selected = {s: v for s, v in discovered.items() if (lo is None or s >= lo) and (hi is None or s <= hi)}
    if not selected:
        raise InputError(source, f"no steps in range {step_range!r} (found {', '.join(map(str, discovered)) or 'none'})")
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
                               source={"path": str(where), "sha256": sha}, lag=lag, rescore=rescore)
    if errors:
        raise InputErrors(errors)
    return plans


def loop_job(source: Path, run_path: Path, *, step_range: str | None, mapping: dict[str, str], lag: int, rescore: bool,
             on_error: str | None, judge: JudgeChoice, flags: dict[str, Any], wait: float, say: Say,
             on_step: Hook | None = None, on_stage: Hook | None = None, on_record: Hook | None = None) -> LoopResult:
    from amaris_cli.stages.loop import run_loop

    started = time.monotonic()
    run = RunDir(run_path)
    settings = _settings(run, flags)
    plans = loop_plans(source, run, step_range, mapping, settings, lag, rescore)
    policy = FailurePolicy.resolve(on_error, settings)
    result = LoopResult()
    with ExitStack() as stack:
        session = stack.enter_context(open_session(run, flags, judge, announce=say))
        memory = stack.enter_context(_memory(session, wait, say))

        async def run_it() -> list[StepReport]:
            # The memory is opened when the first evolution needs it, not before: until then the loop may
            # wait for an evolution of an earlier step that another process runs, and that one needs it.
            return await run_loop(session, plans, memory, policy=policy, on_step=on_step, on_stage=on_stage,
                                  on_record=on_record, wait=wait)

        try:
            result.reports = session.execute(run_it())
        finally:
            _finish(result, session, started)
    return result
