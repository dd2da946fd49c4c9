"""The evolution of one step: analyze, summarize, and (when due) retrieve and update the rubric,
then optionally re-score the step with the rubric its update produced.

This is what runs beside training: `amaris evolve --run R --step t &` while the trainer trains and
`score` of step t+1 runs. Its analyses need only the step's own scores, so they start at once;
summarizing and updating read the memory and the history of earlier steps, so they wait until the
evolutions of all earlier steps are complete (evolutions run in step order), then take the memory's
writer lock. The step's provenance records the evolution as `done` (or `failed`, with the error, so
later evolutions waiting for it stop too).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from amaris_cli import artifacts
from amaris_cli.errors import AmarisError, InputError, StageFailed
from amaris_cli.eventloop import blocking
from amaris_cli.memory.service import RunCatalog, in_thread, index_step
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import SummaryRecord
from amaris_cli.policy import NotEvaluated
from amaris_cli.rollouts import group_by_instance
from amaris_cli.rundir import RunDir
from amaris_cli.schedule import earlier_steps, wait_for_evolutions
from amaris_cli.session import Session
from amaris_cli.stages.analyze import analyze_step
from amaris_cli.stages.common import StageOutcome
from amaris_cli.stages.reliability import beside as reliability_beside
from amaris_cli.stages.score import score_step
from amaris_cli.stages.summarize import summarize_step
from amaris_cli.stages.update import UpdateOutcome, update_step


@dataclass
class EvolveOutcome:
    step: int
    analyzed: StageOutcome
    summarized: StageOutcome
    updated: UpdateOutcome | None = None
    rescored: StageOutcome | None = None


def require_scores(session: Session, step: int) -> None:
    """That the step's scores are whole, derived from its current rollouts and, under `fail`, without failures."""
    _score_failures(session, step, session.policy.check)


def scores_not_evaluated(session: Session, step: int) -> str | None:
    """`require_scores` for the step's evolution: under `carry`, failures are why it evolves as skipped."""
    return _score_failures(session, step, session.policy.not_evaluated,
                           or_else=", or evolve it as skipped, learning nothing from it (`--failed-step carry`)")


def _score_failures(session: Session, step: int, check: Callable[..., str | None], or_else: str = "") -> str | None:
    run = session.run
    fresh = artifacts.freshness(run, step, artifacts.SCORES)
    if fresh.sha is None:
        raise _no_scores(run, step)
    if fresh.upstream:
        raise InputError(artifacts.scores_path(run, step), f"step {step}: the scores are out of date ({', '.join(fresh.upstream)} "
                         f"changed since they were judged); score the step again first: `amaris score ROLLOUTS.jsonl "
                         f"--run {run.path} --step {step}`")
    scores = artifacts.load_scores(run, step)
    failed = [s for s in scores if s.status == "failed"]
    return check("score", step, len(failed), len(scores), [f"{s.rollout_id}: {s.error}" for s in failed],
                 retry=f"score the step again to retry them (`amaris score ROLLOUTS.jsonl --run {run.path} --step {step}`)"
                 + or_else)


def no_rollouts(run: RunDir, step: int) -> str | None:
    """Why a step holds no rollouts (`amaris serve` writes a step none of whose batch reached it so: an outage
    between the trainer and the server), or None when it holds some. Such a step is not evaluated: under any
    policy it evolves as skipped, since nothing failed in amaris and there is nothing to learn from."""
    if not artifacts.stored_empty(run, step):  # (a step not stored yet is said below)
        return None
    made = artifacts.derivation(run, step, artifacts.ROLLOUTS)  # only its inputs are read: no file is hashed
    source = made.inputs.get("source", {}) if made is not None else {}
    why = source.get("reason") if isinstance(source, dict) else None
    return "none of the step's rollouts reached amaris" + (f" ({why})" if isinstance(why, str) and why else "")


def _no_scores(run: RunDir, step: int) -> InputError:
    return InputError(artifacts.scores_path(run, step), f"step {step} has no complete scores; run "
                      f"`amaris score ROLLOUTS.jsonl --run {run.path} --step {step}` first")


def require_analyses(session: Session, step: int) -> None:
    """Under `fail`, a step whose analyses failed is not summarized or updated (exit 4)."""
    run = session.run
    analyses = artifacts.load_analyses(run, step) if artifacts.analyses_path(run, step).exists() else []
    failed = [a for a in analyses if a.status != "analyzed"]
    session.policy.check("analyze", step, len(failed), len(analyses), [f"{a.rollout_id}: {a.error}" for a in failed],
                         retry=f"analyze the step again to retry them (`amaris analyze --run {run.path} --step {step}`)")


async def evolve_step(
    session: Session,
    step: int,
    memory: Callable[[], Awaitable[MemoryStore | None]],
    *,
    update: bool,
    rescore: bool,
    wait: float,
    fail_if_idle: bool = False,
    force: bool = False,
    index_now: bool = True,
    on_stage: Callable[[str, int], None] | None = None,
    on_record: Callable[[object], None] | None = None,
    by_stage: Mapping[str, Session] | None = None,
) -> EvolveOutcome:
    """`memory` opens the memory for writing (waiting for its lock) when first called, after the earlier
    evolutions are complete. `index_now=False` leaves indexing the step to the caller. `by_stage` gives
    a stage (analyze, summarize, update, rescore) a session of its own: a replay repeats each stage with the
    command settings its files record (a run built by stage commands and `loop` mixes them)."""
    stages = by_stage or {}
    run = session.run
    stage = on_stage or (lambda _stage, _step: None)
    if not artifacts.rollouts_path(run, step).exists():
        # Refused before anything is written: the failed mark of a step nobody scored made a step of an empty
        # directory, which `inspect` listed with 0 rollouts (a later step's evolution waits for it, saying why)
        raise _no_scores(run, step)
    # While it runs, the step's evolution is not done: a `score` that needs it waits instead of taking a
    # rubric version this run is about to rewrite.
    artifacts.clear_evolved(run, step)
    try:
        # Under `carry`, why the step evolves as skipped: failed scores (then it is not analyzed) or analyses; in a
        # per-instance run, why the instances with failed records do (the step is analyzed for the others).
        # A step with no rollouts (an outage between the trainer and `amaris serve`) is not evaluated either.
        outage = no_rollouts(run, step)
        not_evaluated = NotEvaluated(step=scores_not_evaluated(session, step) or outage)
        if not_evaluated.step is not None and outage is None:
            failed = {s.rollout_id for s in artifacts.load_scores(run, step) if s.status == "failed"}
            not_evaluated = _instances_not_evaluated(session, step, "score", failed) or not_evaluated
        analyzed = StageOutcome(stage="analyze", step=step)
        if not_evaluated.step is None:
            stage("analyze", step)
            async with reliability_beside(session, step, force=force):  # the judge reliability check, when on
                analyzed = await analyze_step(stages.get("analyze", session), step, force=force, on_done=on_record,
                                              skipped_instances=not_evaluated.instances.keys())
            reason = session.policy.not_evaluated("analyze", step, analyzed.failed, analyzed.total, analyzed.errors)
            if reason is not None:
                failed = {a.rollout_id for a in artifacts.load_analyses(run, step) if a.status != "analyzed"}
                by_instance = _instances_not_evaluated(session, step, "analyze", failed, every=True)
                not_evaluated = (NotEvaluated(instances={**by_instance.instances, **not_evaluated.instances})
                                 if by_instance is not None else NotEvaluated(step=reason))
        await blocking(lambda stop: wait_for_evolutions(run, earlier_steps(run, step), wait=wait, say=session.say,
                                                        needed_for=f"the evolution of step {step}",
                                                        fail_if_idle=fail_if_idle, stop=stop))
        store = await memory()
        stage("summarize", step)
        # The step is indexed once the evolution is done (below): its update's retrieval must not see it, and
        # the next step's scoring, which waits for this evolution, does not need it.
        summarized = await summarize_step(stages.get("summarize", session), step, None, force=force,
                                          not_evaluated=not_evaluated)
        outcome = EvolveOutcome(step=step, analyzed=analyzed, summarized=summarized)
        if update:
            stage("update", step)
            outcome.updated = await update_step(stages.get("update", session), step, store, force=force, index=False)
            if rescore:
                stage("rescore", step)
                rollouts = artifacts.load_rollouts(run, step)
                outcome.rescored, _ = await score_step(stages.get("rescore", session), step, rollouts, limit=step + 1,
                                                       explicit_version=step + 1,
                                                       output=artifacts.RESCORES, force=force,
                                                       on_done=on_record)
    except Exception as exc:  # noqa: BLE001 - any error (an OSError, a bug) leaves a failed mark, which later
        # steps report with its cause; without one they would wait for an evolution that nothing runs
        resume = exc.retry if isinstance(exc, StageFailed) and exc.retry else \
            f"re-run `amaris evolve --run {run.path} --step {step}`"
        error = str(exc) if isinstance(exc, AmarisError) else f"{type(exc).__name__}: {exc}"
        try:
            artifacts.mark_evolved(run, step, artifacts.Evolution(status="failed", update=update, rescore=rescore,
                                                                  error=error, resume=resume, **session.how.recorded()))
        except OSError:
            pass  # e.g. the disk is full: the step's own error is the one to report (later evolutions see no mark
            # and no running evolution, and stop with "evolve step N first")
        raise
    skipped = _skipped(run, step, update)
    if skipped is not None:
        session.say(f"warning: step {step} was not evaluated ({skipped}); it evolved as skipped"
                    + (f", rubric version {step + 1} carries the one before it forward unchanged" if update else ""))
    artifacts.mark_evolved(run, step, artifacts.Evolution(status="done", update=update, rescore=rescore,
                                                          skipped=skipped, **session.how.recorded()))
    if index_now and store is not None:
        # After the mark: a `score --lag` waiting for this step goes on while the step is embedded. Should this
        # fail, the memory is only behind the files, and the next update's sync indexes the step.
        await in_thread(store, lambda: index_step(store, RunCatalog(run), step))
    return outcome


def _instances_not_evaluated(session: Session, step: int, stage: str, failed: set[str],
                             every: bool = False) -> NotEvaluated | None:
    """Under `carry` in a per-instance run, the instances with failed records (of `stage`) are not evaluated and
    the step's others are; None when the run is not per-instance, its `carry_scope` is the step or, unless
    `every`, every instance has failed records (the step as a whole is not evaluated then, and not analyzed)."""
    pipeline = session.settings.pipeline
    if not pipeline.per_instance or pipeline.carry_scope == "step":
        return None
    groups = group_by_instance(artifacts.load_rollouts(session.run, step))
    reasons = {key: session.policy.instance_not_evaluated(stage)
               for key, members in groups.items() if any(r.id in failed for r in members)}
    if len(reasons) == len(groups) and not every:
        return None
    return NotEvaluated(instances=reasons)


def _skipped(run: RunDir, step: int, update: bool) -> str | None:
    """Why the step (or an instance of it) was skipped, with the counts, or None when it was evaluated: amaris
    wrote its summary (no rollout analyzed, no summarizer answer), or its due update was carried forward because
    the query generator, the updater or the gate's judge gave no answer."""
    skipped: dict[str, list[SummaryRecord]] = {}  # by reason: per-instance steps share one
    carried = []
    for s in artifacts.load_summaries(run, step):
        if s.skipped is not None:
            skipped.setdefault(s.skipped.reason, []).append(s)
            continue
        record = artifacts.load_update(run, step, s.instance_id) if update else None
        if record is not None and record.carried_forward is not None and record.carried_forward.cause == "skipped":
            carried.append(f"summarized, not updated: {record.carried_forward.reason}{_where([s])}")
    reasons = []
    for reason, group in skipped.items():
        counts = [s.skipped for s in group if s.skipped is not None]
        reasons.append(f"{sum(c.judged for c in counts)} of {sum(c.rollouts for c in counts)} rollouts judged, "
                       f"{sum(c.analyzed for c in counts)} analyzed: {reason}{_where(group)}")
    return "; ".join([*reasons, *carried]) or None


def _where(summaries: list[SummaryRecord], shown: int = 3) -> str:
    """Which instances, when the step has them: a few names and how many more."""
    names = [str(s.instance_id) for s in summaries if s.instance_id is not None]
    if not names:
        return ""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f" (instance{'s' if len(names) > 1 else ''} {', '.join(names[:shown])}{more})"

