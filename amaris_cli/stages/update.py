"""Stage 4: retrieve history (static + dynamic), ask the updater, validate its edits, and write
the next rubric version. update.json is written last: it marks the step's update as done."""

from __future__ import annotations

from dataclasses import dataclass, field

from amaris_cli.agents.query_generator import generate_queries
from amaris_cli.agents.updater import propose_update
from amaris_cli.errors import AmarisError, InputError
from amaris_cli.jsonio import write_json_atomic
from amaris_cli.memory.service import (
    RunCatalog,
    dynamic_retrieval,
    index_step,
    static_retrieval,
    sync_before,
)
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import RetrievalRecord, SummaryRecord, UpdateRecord
from amaris_cli.records import (
    load_retrieval,
    load_summaries,
    load_update,
    retrieval_path,
    summary_path,
    update_path,
)
from amaris_cli.rubrics import apply_modifications, cap_active
from amaris_cli.session import Session
from amaris_cli.stages.common import bounded_map
from amaris_cli.stages.score import rubric_for


@dataclass
class UpdateOutcome:
    step: int
    strategies: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    modified: int = 0
    rejected: int = 0
    reused: int = 0
    queries: int = 0
    dynamic_hits: int = 0
    static_entries: int = 0


async def _update_one(session: Session, step: int, summary: SummaryRecord, memory: MemoryStore | None,
                      catalog: RunCatalog) -> tuple[UpdateRecord, RetrievalRecord]:
    run, kit, mem = session.run, session.kit, session.settings.memory
    iid = summary.instance_id
    current = rubric_for(run, step, instance_id=iid)
    static = static_retrieval(run, step, mem.static_steps, iid) if mem.static else []
    queries: list[str] = []
    dynamic = []
    if mem.dynamic:
        if memory is None:
            raise AmarisError("dynamic retrieval needs the memory index")
        answer = await generate_queries(kit, step, summary, mem.max_queries)
        if answer.value is None:
            raise AmarisError(f"step {step}: the query generator failed: {answer.error}")
        queries = answer.value.queries
        dynamic = dynamic_retrieval(memory, catalog, queries, mem.results_per_query, step, {e.id for e in static}, iid)
    retrieval = RetrievalRecord(step=step, instance_id=iid, static_enabled=mem.static, static_steps=mem.static_steps,
                                dynamic_enabled=mem.dynamic, results_per_query=mem.results_per_query,
                                max_queries=mem.max_queries, static=static, queries=queries, dynamic=dynamic)
    answer = await propose_update(kit, current, step, summary, static, dynamic)
    if answer.value is None:
        raise AmarisError(f"step {step}: the updater failed: {answer.error}; earlier steps are intact, re-run to retry")
    proposal = answer.value
    new_rubric, applied, rejected = apply_modifications(current, proposal.modifications, session.settings.rubric, step + 1, step)
    new_rubric, deactivated = cap_active(new_rubric, summary.stats, session.settings.rubric.max_active_adaptive)
    record = UpdateRecord(step=step, instance_id=iid, from_version=current.version, to_version=step + 1,
                          strategy=proposal.strategy, rationale=proposal.rationale,
                          memory_consultation=proposal.memory_consultation, applied=applied, rejected=rejected,
                          deactivated=deactivated,
                          final_adaptive=new_rubric.adaptive)
    run.save_rubric(new_rubric)
    write_json_atomic(retrieval_path(run, step, iid), retrieval.model_dump(mode="json"))
    write_json_atomic(update_path(run, step, iid), record.model_dump(mode="json"))
    return record, retrieval


async def update_step(session: Session, step: int, memory: MemoryStore | None, force: bool = False,
                      index: bool = True) -> UpdateOutcome:
    """`index=False` leaves indexing the step to the caller (the loop does it in the background)."""
    run = session.run
    summaries = load_summaries(run, step)
    if not summaries:
        raise InputError(summary_path(run, step), f"step {step} has no summary; run `amaris summarize` first")
    outcome = UpdateOutcome(step=step)
    catalog = RunCatalog(run)
    if memory is not None:
        sync_before(memory, catalog, step)

    async def one(summary: SummaryRecord) -> tuple[UpdateRecord, RetrievalRecord | None]:
        iid = summary.instance_id
        existing = load_update(run, step, iid)
        if existing is not None and not force and run.rubric_path(step + 1, iid).exists():
            outcome.reused += 1
            return existing, load_retrieval(run, step, iid)
        return await _update_one(session, step, summary, memory, catalog)

    results = await bounded_map(summaries, one, session.settings.agent("updater").concurrency)
    for record, retrieval in results:
        if retrieval is not None:
            outcome.queries += len(retrieval.queries)
            outcome.dynamic_hits += len(retrieval.dynamic)
            outcome.static_entries += len(retrieval.static)
        outcome.strategies.append(record.strategy)
        outcome.added += sum(m.op == "add" for m in record.applied)
        outcome.removed += sum(m.op == "remove" for m in record.applied)
        outcome.modified += sum(m.op in ("modify", "reweight") for m in record.applied)
        outcome.rejected += len(record.rejected)
    if memory is not None and index:
        index_step(memory, catalog, step)  # the whole step, now that its update no longer searches it
    session.manifest.mark(step, "update")
    session.save_manifest()
    return outcome
