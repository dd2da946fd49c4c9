"""Stage 4: retrieve history (static + dynamic), ask the updater, validate its edits, check the new
version with the adoption gate (gate.py), and write the next rubric version: the new one, or the previous
one carried forward when the gate refuses it. update.json is written last: it marks the step's update as
done.

An update is reused only while its inputs are unchanged: the step's summary, the rubric it edits,
the history it could retrieve (every earlier step's analyses, summaries and updates, by content),
the retrieval and rubric settings, the prompts and the agents' settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amaris_cli import artifacts
from amaris_cli.agents.query_generator import generate_queries
from amaris_cli.agents.updater import propose_update
from amaris_cli.errors import AgentFailed, AmarisError, InputError
from amaris_cli.gate import StepProbes, budgets, check, same_criteria, step_probes
from amaris_cli.llm.endpoint import strip_userinfo
from amaris_cli.memory.service import (
    RunCatalog,
    dynamic_retrieval,
    in_thread,
    index_step,
    static_retrieval,
    sync_before,
)
from amaris_cli.memory.store import MemoryStore
from amaris_cli.models import CarriedForward, RetrievalRecord, RubricSet, SummaryRecord, UpdateRecord
from amaris_cli.reliability import StepRecords, updater_reliability
from amaris_cli.rollouts import group_by_instance
from amaris_cli.rubrics import apply_modifications, cap_active
from amaris_cli.rundir import RunDir
from amaris_cli.session import Session
from amaris_cli.stability import update_edits
from amaris_cli.stages.common import (
    Upstream,
    agent_inputs,
    analyses_sha,
    bounded_map,
    require_sha,
    rubric_inputs,
    training_inputs,
)
from amaris_cli.stages.score import rubric_for
from amaris_cli.stages.summarize import scoring_rubric

MEMORY_FILES = (artifacts.ANALYSES, artifacts.SUMMARY, artifacts.UPDATE)


@dataclass
class UpdateOutcome:
    step: int
    strategies: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    modified: int = 0
    unchanged: int = 0  # applied modifies and reweights that changed nothing (stability.py)
    rejected: int = 0
    reused: int = 0
    refused: int = 0  # updates the adoption gate refused (their previous version carried forward)
    gate_calls: int = 0
    queries: int = 0
    dynamic_hits: int = 0
    static_entries: int = 0


def history_digest(run: RunDir, step: int) -> str:
    """The content of everything the update of `step` can retrieve: the memory files of earlier steps."""
    rows = []
    for s in artifacts.step_numbers(run):
        if s >= step:
            break
        files = artifacts.read_provenance(run, s).files
        rows.append([s, sorted((name, d.sha256) for name, d in files.items() if name.rsplit("/", 1)[-1] in MEMORY_FILES)])
    return artifacts.digest(rows)


def gate_inputs(session: Session, step: int, probes: StepProbes | None, skipped: bool = False,
                seen: Upstream | None = None) -> dict[str, Any]:
    """What the adoption gate's decision depends on besides the two rubrics: its settings, the probes file,
    the step's rollouts, scores and analyses (the probes' source and the budget), the group scorer. A `skipped`
    step is never gated, and may have no analyses (policy.py, `carry`)."""
    run, settings = session.run, session.settings
    if not settings.gate.enabled:
        return {"enabled": False}
    return {
        # (`fill` only when not `prefix`: the inputs of runs made before it existed stay what they were)
        **settings.gate.model_dump(exclude={"probes_file"} | ({"fill"} if settings.gate.fill == "prefix" else set())),
        "probes": None if probes is None else probes.sha256 or artifacts.file_sha256(probes.path) or f"missing: {probes.named}",
        "scores": require_sha(run, step, artifacts.SCORES, "run `amaris score` first", seen),
        "analyses": analyses_sha(run, step, skipped, seen),
        "agents": agent_inputs(session, "group_scorer"),
        "budget": settings.pipeline.model_dump(include={"group_by", "group_size", "merge_fan_in", "per_instance"}),
    }


def update_inputs(session: Session, step: int, summary_name: str, base: RubricSet, probes: StepProbes | None,
                  skipped: bool = False, history: str | None = None, seen: Upstream | None = None) -> dict[str, Any]:
    """`probes`: the gate's probes file as read once for the update (step_probes), which its gate judges; `history`:
    history_digest as the update stage read it once for all its instances; `seen`: its view of the step's upstream
    files (stages/common.py)."""
    run, settings = session.run, session.settings
    summary_sha = require_sha(run, step, summary_name, "run `amaris summarize` first")
    memory = settings.memory.model_dump(include={"static", "static_steps", "dynamic", "results_per_query",
                                                 "max_queries", "embedding", "embedding_model", "url", "namespace"})
    memory["url"] = strip_userinfo(memory["url"])  # provenance is written: the server, never its credentials
    return {
        "summary": summary_sha,
        "base_rubric": rubric_inputs(run, [base]),
        "history": history if history is not None else history_digest(run, step),
        "memory": memory,
        "rubric_rules": settings.rubric.model_dump(include={"max_adaptive", "max_active_adaptive", "min_weight",
                                                            "max_weight"})
        # (the floor only when set: the inputs of runs made before it existed stay what they were)
        | ({} if settings.rubric.min_anchor_share is None else {"min_anchor_share": settings.rubric.min_anchor_share}),
        "agents": agent_inputs(session, "query_generator", "updater"),
        "gate": gate_inputs(session, step, probes, skipped, seen),
        **training_inputs(session, step=step),
    }


def _saved_rubric(run: RunDir, version: int, instance_id: str | None) -> RubricSet | None:
    """The rubric file as it is now; None when it is missing or no longer a valid rubric (an edit by hand)."""
    try:
        return run.load_rubric(version, instance_id)
    except AmarisError:
        return None


def _rubric_of(base: RubricSet, record: UpdateRecord) -> RubricSet:
    return RubricSet(version=record.to_version, instance_id=base.instance_id, anchors=base.anchors,
                     adaptive=record.final_adaptive, produced_by_step=record.step)


def _measured(run: RunDir, step: int, instance_id: str | None) -> RubricSet | None:
    """The rubric whose verdicts the step's statistics are of (with --lag, an earlier version than the update
    edits), as summarize takes it."""
    rollouts = artifacts.load_rollouts(run, step)
    members = {r.id for r in (rollouts if instance_id is None else group_by_instance(rollouts).get(instance_id, []))}
    group = [s for s in artifacts.load_scores(run, step) if s.rollout_id in members]  # in input order
    return scoring_rubric(run, instance_id, group) if group else None


async def _update_one(session: Session, step: int, summary: SummaryRecord, memory: MemoryStore | None,
                      catalog: RunCatalog, force: bool, gate_budget: tuple[int, int] = (0, 0),
                      flips: StepRecords | None = None, history: str | None = None, seen: Upstream | None = None,
                      ) -> tuple[UpdateRecord, RetrievalRecord | None, bool]:
    """(record, retrieval, recomputed)"""
    run, kit, mem = session.run, session.kit, session.settings.memory
    iid = summary.instance_id
    base = rubric_for(run, step, iid)
    reliability = updater_reliability(run, step, base, flips)  # the flip rates of its criteria, when measured
    probes = step_probes(session, step) if session.settings.gate.enabled else None  # read once: hashed = judged
    inputs = {**update_inputs(session, step, artifacts.rel(run, artifacts.SUMMARY, iid), base, probes,
                              summary.skipped is not None, history, seen), **reliability.inputs}
    name = artifacts.rel(run, artifacts.UPDATE, iid)
    # The update is reused with its retrieval: one edited or lost since (a carried-forward update has none) makes
    # the update run again, its requests answered from calls.jsonl.
    retrieval = artifacts.freshness(run, step, artifacts.rel(run, artifacts.RETRIEVAL, iid))
    if (not force and artifacts.freshness(run, step, name).made_from(inputs)
            and (retrieval.made is None or retrieval.made_from(inputs))):
        existing = artifacts.load_update(run, step, iid)
        assert existing is not None
        rubric = _rubric_of(base, existing)
        if _saved_rubric(run, rubric.version, iid) != rubric:
            # The update is whole but its rubric file was lost or edited: rewritten, and said (an edit made by hand
            # is undone: a rubric version is what its update wrote, which later steps were scored with)
            path = run.rubric_path(rubric.version, iid)
            what = "was edited since written" if path.exists() else "was missing"
            run.save_rubric(rubric)
            session.say(f"{path}: rubric version {rubric.version} {what}; written again from {run.step_dir(step) / name} "
                        "(to change a rubric, edit the base rubric of a new run, or let an update change it)")
        return existing, artifacts.load_retrieval(run, step, iid), False
    if summary.skipped is not None:
        why = CarriedForward(cause="skipped", reason=summary.skipped.reason)
        return _carry_forward(session, step, base, inputs, why), None, True
    static = static_retrieval(run, step, mem.static_steps, iid) if mem.static else []
    queries: list[str] = []
    dynamic = []
    try:
        if mem.dynamic:
            if memory is None:
                raise AmarisError("dynamic retrieval needs the memory index")
            answer = await generate_queries(kit, step, summary, mem.max_queries)
            if answer.value is None:
                raise AgentFailed(f"step {step}: the query generator failed: {answer.error}; re-run to retry")
            queries = answer.value.queries
            dynamic = await in_thread(memory, lambda: dynamic_retrieval(memory, catalog, queries, mem.results_per_query,
                                                                        step, static, iid))
        retrieval = RetrievalRecord(step=step, instance_id=iid, static_enabled=mem.static,
                                    static_steps=mem.static_steps, dynamic_enabled=mem.dynamic,
                                    results_per_query=mem.results_per_query, max_queries=mem.max_queries,
                                    static=static, queries=queries, dynamic=dynamic)
        answer = await propose_update(kit, base, step, summary, static, dynamic, reliability.block)
        if answer.value is None:
            raise AgentFailed(f"step {step}: the updater failed: {answer.error}; earlier steps are intact, re-run "
                              "to retry")
    except AgentFailed as exc:
        if not session.policy.skips_failed_steps:
            raise
        return _carry_forward(session, step, base, inputs, CarriedForward(cause="skipped", reason=str(exc))), None, True
    proposal = answer.value
    new_rubric, applied, rejected = apply_modifications(base, proposal.modifications, session.settings.rubric, step + 1, step)
    cap = session.settings.rubric.max_active_adaptive
    measured = _measured(run, step, iid) if cap is not None and len(new_rubric.adaptive) > cap else None
    new_rubric, deactivated = cap_active(new_rubric, summary.stats, cap, measured=measured)
    gate = None
    if session.settings.gate.enabled and not same_criteria(base, new_rubric):
        own_calls, budget = gate_budget
        try:
            gate = await check(session, step, base, new_rubric, probes, budget=budget, own_calls=own_calls,
                               refused_edits=applied)
        except AgentFailed as exc:  # the judge could not check the version: as when the updater fails
            if not session.policy.skips_failed_steps:
                raise
            return _carry_forward(session, step, base, inputs, CarriedForward(cause="skipped", reason=str(exc))), \
                None, True
    record = UpdateRecord(step=step, instance_id=iid, from_version=base.version, to_version=step + 1,
                          strategy=proposal.strategy, rationale=proposal.rationale,
                          memory_consultation=proposal.memory_consultation, applied=applied, rejected=rejected,
                          deactivated=deactivated, final_adaptive=new_rubric.adaptive, gate=gate)
    if gate is not None and gate.decision == "refused":
        # Written as every carried-forward version is (the previous criteria at step + 1); the record keeps what
        # the updater proposed and the gate's reasons, and the edits it would have applied are in `gate`.
        carried = carried_forward_record(step, base, CarriedForward(cause="gate", reason=gate.reason))
        record = carried.model_copy(update={"strategy": proposal.strategy, "rationale": proposal.rationale,
                                            "memory_consultation": proposal.memory_consultation,
                                            "rejected": rejected, "gate": gate})
        new_rubric = _rubric_of(base, record)
    run.save_rubric(new_rubric)
    artifacts.write_json_recorded(run, step, artifacts.rel(run, artifacts.RETRIEVAL, iid),
                                  retrieval.model_dump(mode="json"), inputs, session.how)
    artifacts.write_json_recorded(run, step, name, record.model_dump(mode="json"), inputs, session.how)
    return record, retrieval, True


def carried_forward_record(step: int, base: RubricSet, why: CarriedForward) -> UpdateRecord:
    """An update that writes the rubric it started from again, unchanged (a skipped step, or a version the
    adoption gate refused): version step + 1 exists, so the schedule and every reader see the step as updated."""
    return UpdateRecord(step=step, instance_id=base.instance_id, from_version=base.version, to_version=step + 1,
                        strategy="MAINTENANCE", rationale=f"carried forward unchanged ({why.cause}): {why.reason}",
                        memory_consultation=[], applied=[], rejected=[], final_adaptive=base.adaptive,
                        carried_forward=why)


def _carry_forward(session: Session, step: int, base: RubricSet, inputs: dict[str, Any],
                   why: CarriedForward) -> UpdateRecord:
    run = session.run
    record = carried_forward_record(step, base, why)
    run.save_rubric(_rubric_of(base, record))
    # No retrieval was made: a retrieval.json of an earlier attempt describes nothing this update used.
    artifacts.remove(run, step, artifacts.rel(run, artifacts.RETRIEVAL, base.instance_id))
    artifacts.write_json_recorded(run, step, artifacts.rel(run, artifacts.UPDATE, base.instance_id),
                                  record.model_dump(mode="json"), inputs, session.how)
    return record


async def update_step(session: Session, step: int, memory: MemoryStore | None, force: bool = False,
                      index: bool = True) -> UpdateOutcome:
    """`index=False` leaves indexing the step to the caller (the loop does it in the background)."""
    run = session.run
    summaries = artifacts.load_summaries(run, step)
    if not summaries:
        raise InputError(artifacts.summary_path(run, step), f"step {step} has no summary; run `amaris summarize` first")
    outcome = UpdateOutcome(step=step)
    catalog = RunCatalog(run)
    if memory is not None:
        await in_thread(memory, lambda: sync_before(memory, catalog, step))

    own_calls, allowances = budgets(session, step, len(summaries)) if session.settings.gate.enabled else (0, [])
    # Read once for every instance's updater: an update writes neither the reliability records, nor an earlier step,
    # nor the step's rollouts, scores and analyses.
    flips, history, seen = StepRecords(run), history_digest(run, step), Upstream(run, step)

    async def one(index: int) -> tuple[UpdateRecord, RetrievalRecord | None, bool]:
        budget = (own_calls, allowances[index]) if allowances else (0, 0)
        return await _update_one(session, step, summaries[index], memory, catalog, force, budget, flips, history, seen)

    for record, retrieval, recomputed in await bounded_map(list(range(len(summaries))), one,
                                                           session.settings.agent("updater").concurrency):
        outcome.reused += not recomputed
        if record.gate is not None:
            outcome.refused += record.gate.decision == "refused"
            outcome.gate_calls += record.gate.calls
        if retrieval is not None:
            outcome.queries += len(retrieval.queries)
            outcome.dynamic_hits += len(retrieval.dynamic)
            outcome.static_entries += len(retrieval.static)
        outcome.strategies.append(record.strategy)
        edits = update_edits(run, record)  # an applied edit that restates a criterion changes nothing: not counted
        outcome.added += sum(m.op == "add" for m in record.applied)
        outcome.removed += sum(m.op == "remove" for m in record.applied)
        outcome.modified += sum(m.op in ("modify", "reweight") and c for m, c in zip(record.applied, edits, strict=True))
        outcome.unchanged += edits.count(False)
        outcome.rejected += len(record.rejected)
    artifacts.flush(run, step)  # a stage's records reach the disk as it ends (artifacts.held)
    if memory is not None and index:
        await in_thread(memory, lambda: index_step(memory, catalog, step))  # the whole step: its update no longer searches it
    return outcome
