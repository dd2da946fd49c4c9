"""What a run holds, computed from its files: per-step rewards, failures, updates, rubric evolution,
hacking patterns, memory contents, and tokens and cost per step and agent."""

from __future__ import annotations

from statistics import fmean, pstdev
from typing import Any

from amaris_cli.artifacts import (
    load_analyses,
    load_retrieval,
    load_scores,
    load_summary,
    load_update,
    stale_files,
    step_numbers,
    step_state,
)
from amaris_cli.config import Settings
from amaris_cli.jsonio import iter_jsonl
from amaris_cli.rundir import RunDir


def _histogram(values: list[float], bins: int = 5) -> list[int]:
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int(v * bins))] += 1
    return counts


def usage_by_step(run: RunDir, settings: Settings) -> dict[str, dict[str, dict[str, float]]]:
    """{step: {agent: {calls, replayed, prompt_tokens, completion_tokens, cost}}}: `calls` were sent to a model
    and are what tokens and cost count; `replayed` were answered from a record. Cost only for priced models."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for call in iter_jsonl(run.calls_path):
        step = str(call.get("step"))
        row = table.setdefault(step, {}).setdefault(call["agent"], {"calls": 0, "replayed": 0, "prompt_tokens": 0,
                                                                     "completion_tokens": 0, "cost": 0.0})
        usage = call.get("usage") or {}
        if call.get("source", "model") != "model":  # answered from a record: no call made, nothing spent
            row["replayed"] += 1
            continue
        row["calls"] += 1
        row["prompt_tokens"] += usage.get("prompt_tokens", 0)
        row["completion_tokens"] += usage.get("completion_tokens", 0)
        price = settings.prices.get(call.get("model", ""))
        if price is not None:
            row["cost"] += (usage.get("prompt_tokens", 0) * price.prompt + usage.get("completion_tokens", 0) * price.completion) / 1e6
    return table


def step_view(run: RunDir, step: int) -> dict[str, Any]:
    scores = load_scores(run, step)
    rewards = [s.reward for s in scores if s.status == "scored" and s.reward is not None]
    summary = load_summary(run, step)
    update = load_update(run, step)
    view: dict[str, Any] = {
        "step": step,
        "rollouts": len(scores),
        "failed": sum(s.status == "failed" for s in scores),
        "rubric_version": scores[0].rubric_version if scores else None,
        "mean_reward": round(fmean(rewards), 6) if rewards else None,
        "std_reward": round(pstdev(rewards), 6) if rewards else None,
        "reward_histogram": _histogram(rewards),
        "hacking": [h.model_dump(mode="json") for h in summary.hacking] if summary else [],
        "strategy": update.strategy if update else None,
        "applied": [m.model_dump(mode="json", exclude_none=True) for m in update.applied] if update else [],
        "rejected": [r.model_dump(mode="json") for r in update.rejected] if update else [],
        "deactivated": [d.model_dump(mode="json") for d in update.deactivated] if update else [],
        "state": step_state(run, step),
    }
    return view


def inspect_run(run: RunDir, step: int | None = None) -> dict[str, Any]:
    manifest = run.load_manifest()
    settings = Settings.model_validate(manifest.config)
    steps = step_numbers(run)
    usage = usage_by_step(run, settings)
    memory = {"analysis": 0, "summary": 0, "update": 0}
    for s in steps:
        memory["analysis"] += sum(a.status == "analyzed" for a in load_analyses(run, s))
        memory["summary"] += load_summary(run, s) is not None
        memory["update"] += load_update(run, s) is not None
    result: dict[str, Any] = {
        "run": str(run.path),
        "version": manifest.version,
        "replay_of": manifest.replay_of,
        "steps": [step_view(run, s) for s in steps],
        "rubric_versions": run.rubric_versions(),
        "memory_entries": memory,
        "usage": usage,
        "totals": {
            "prompt_tokens": sum(r["prompt_tokens"] for a in usage.values() for r in a.values()),
            "completion_tokens": sum(r["completion_tokens"] for a in usage.values() for r in a.values()),
            "cost": round(sum(r["cost"] for a in usage.values() for r in a.values()), 6),
            "priced_models": sorted(settings.prices),
        },
    }
    if step is not None:
        detail = step_view(run, step)
        summary = load_summary(run, step)
        retrieval = load_retrieval(run, step)
        detail["criteria"] = [c.model_dump(mode="json") for c in summary.stats.criteria] if summary else []
        detail["summary"] = summary.summary.executive_summary if summary else None
        detail["retrieval"] = ({"static": [e.id for e in retrieval.static], "queries": retrieval.queries,
                                "dynamic": [{"id": h.id, "step": h.step, "distance": h.distance} for h in retrieval.dynamic]}
                               if retrieval else None)
        if detail["rubric_version"] is not None:
            rubric = run.load_rubric(detail["rubric_version"])
            detail["rubric"] = [c.model_dump(mode="json") | {"anchor": c in rubric.anchors} for c in rubric.criteria]
        detail["usage"] = usage.get(str(step), {})
        detail["stale"] = stale_files(run, step)
        result["detail"] = detail
    return result
