"""What a run holds, as `inspect` shows it: per-step rewards, failures, updates, rubric evolution,
hacking patterns, memory contents, and tokens and cost per step and agent, read through the run
reader (reader.py) so every figure is the one the report and `compare` show."""

from __future__ import annotations

from typing import Any

from amaris_cli.artifacts import stale_files
from amaris_cli.reader import RunReader, StepOverview, ValidationOverview
from amaris_cli.rundir import RunDir
from amaris_cli.stepstats import current_stats
from amaris_cli.training import load_training


def step_view(view: StepOverview) -> dict[str, Any]:
    """One step of `inspect --json` (its keys are the documented output)."""
    rewards = view.rewards
    return {
        "step": view.step,
        "rollouts": rewards.n,
        "failed": rewards.failed,
        "rubric_version": view.rubric_versions[0] if view.rubric_versions else None,  # the first of them
        "rubric_versions": view.rubric_versions,  # every version that scored the step (per instance: several)
        "mean_reward": rewards.mean,
        "std_reward": rewards.std,
        "reward_histogram": rewards.histogram,
        "hacking": [h.model_dump(mode="json") for h in view.hacking],
        "strategy": view.strategy,
        "updates": view.updates,  # update records (one per instance in per-instance mode)
        "strategies": view.strategies,  # their strategies, how many chose each
        "rationale": view.rationale,
        "applied": [m.model_dump(mode="json", exclude_none=True) for m in view.applied],
        "applied_changes": view.applied_changes,  # for each, whether it changed the rubric (an edit) or nothing
        "rejected": [r.model_dump(mode="json") for r in view.rejected],
        "deactivated": [d.model_dump(mode="json") for d in view.deactivated],
        "gate": ({"decision": view.gate.decision, "reason": view.gate.reason, "calls": view.gate.calls,
                  "budget": view.gate.budget, "step_calls": view.gate.step_calls}
                 if view.gate is not None else None),
        "refused_by_gate": view.refused_by_gate,  # updates the gate refused (per instance: each instance's)
        "state": view.state,
    }


def validation_view(view: ValidationOverview) -> dict[str, Any]:
    """One step's validation rollouts in `inspect --json` (serve's /validate: judged in no step)."""
    rewards = view.rewards
    return {"step": view.step, "rollouts": rewards.n, "failed": rewards.failed, "rubric_versions": view.rubric_versions,
            "mean_reward": rewards.mean, "std_reward": rewards.std}


def alarms_view(reader: RunReader) -> dict[str, Any]:
    """`alarms`: each onset alarm with its step, kind, pattern, reason and evidence (alarms.py); `alarm_signals`:
    which signals the run gives (a verifiable reward, analyses), so no alarm is told apart from no check."""
    from amaris_cli.alarms import run_alarms

    report = run_alarms(reader)
    return {"alarms": [a.model_dump(mode="json") for a in report.alarms],
            "alarm_signals": {"verifiable_reward": report.gold, "hacking_patterns": any(s.n_analyzed for s in report.steps),
                              "notes": report.notes}}


def inspect_run(run: RunDir, step: int | None = None, whole: bool = True) -> dict[str, Any]:
    """`inspect --json`: the run's overview (and with `step`, the step's detail). `whole=False` with a step: only what
    `inspect --step N` prints (inspect_view): the step's row of the overview, how many steps the run has
    (`step_count`) and its detail; every step's overview, the alarms and the run's flip rates, which it does not
    print, took 6 s of its 9 at 300 steps of 32 rollouts (a profile)."""
    reader = RunReader(run)
    if step is not None:
        reader.require_step(step)
    if step is not None and not whole:
        row = step_view(reader.overview(step))
        return {"run": str(run.path), "step_count": len(reader.steps), "steps": [row],
                "validation": [validation_view(v) for v in [reader.validation(step)] if v is not None],
                "totals": {"priced_models": reader.priced_models}, "detail": step_detail(reader, step, row)}
    result: dict[str, Any] = {
        "run": str(run.path),
        "version": reader.manifest.version,
        "replay_of": reader.manifest.replay_of,
        "steps": [step_view(reader.overview(s)) for s in reader.steps],
        "validation": [validation_view(v) for v in map(reader.validation, reader.validation_steps) if v is not None],
        "rubric_versions": run.rubric_versions(),
        "memory_entries": reader.memory_entries(),
        "usage": reader.usage,
        "totals": reader.usage_totals(),
        **alarms_view(reader),
        "reliability": [f.model_dump(mode="json") for f in reader.flip_rates()],
    }
    if step is not None:
        result["detail"] = step_detail(reader, step, step_view(reader.overview(step)))
    return result


def step_detail(reader: RunReader, step: int, row: dict[str, Any]) -> dict[str, Any]:
    """`detail` of `inspect --step N`: the step's row of the overview (`row`, step_view) and what it drills into."""
    run, settings = reader.run, reader.settings
    detail = dict(row)
    summary = reader.summary(step)
    retrieval = reader.retrieval(step)
    # Per-criterion statistics: stats.json, or computed from the scores while the step has no
    # (fresh) summary. A per-instance run keeps them per instance, not for the step as a whole.
    current = None if settings.pipeline.per_instance else current_stats(run, step)
    detail["criteria"] = [c.model_dump(mode="json") for c in current.stats.criteria] if current else []
    detail["criteria_from"] = current.source if current else None
    detail["criteria_why"] = current.why if current else None
    detail["summary"] = summary.summary.executive_summary if summary else None
    detail["retrieval"] = ({"static": [e.id for e in retrieval.static], "queries": retrieval.queries,
                            "dynamic": [{"id": h.id, "step": h.step, "type": h.type, "distance": h.distance,
                                         "query": h.query} for h in retrieval.dynamic]}
                           if retrieval else None)
    scoring = reader.scoring_rubrics(step)
    detail["rubrics"] = [{"instance": instance, "version": version} for instance, version in scoring]
    if detail["rubric_version"] is not None and all(instance is None for instance, _ in scoring):
        rubric = run.load_rubric(detail["rubric_version"])
        detail["rubric"] = [c.model_dump(mode="json") | {"anchor": c in rubric.anchors} for c in rubric.criteria]
    detail["usage"] = reader.usage.get(str(step), {})
    detail["reliability"] = reader.step_reliability(step).model_dump(mode="json")
    detail["stale"] = stale_files(run, step)
    sent = load_training(run, step)  # a served step's TrainingMetadata, as its requests gave it
    detail["training"] = sent.given() if sent is not None else None
    validation = reader.validation(step)
    detail["validation"] = validation_view(validation) if validation is not None else None
    return detail
