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
from amaris_cli.errors import InputError
from amaris_cli.jsonio import iter_jsonl
from amaris_cli.rundir import RunDir
from amaris_cli.stepstats import current_stats


def _histogram(values: list[float], bins: int = 5) -> list[int]:
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int(v * bins))] += 1
    return counts


def usage_by_step(run: RunDir, settings: Settings) -> dict[str, dict[str, dict[str, float]]]:
    """{step: {agent: {calls, model_calls, replayed, prompt_tokens, completion_tokens, recorded_prompt_tokens,
    recorded_completion_tokens, cost}}}.

    Tokens and cost count only calls sent to a model (`source` "model", or no source in older runs);
    calls answered from a record (`source` "replay", "cache", ...) spent nothing and are counted apart."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for call in iter_jsonl(run.calls_path):
        step = str(call.get("step"))
        row = table.setdefault(step, {}).setdefault(call["agent"], dict.fromkeys(USAGE_KEYS, 0))
        usage = call.get("usage") or {}
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        row["calls"] += 1
        if call.get("source", "model") != "model":
            row["replayed"] += 1
            row["recorded_prompt_tokens"] += prompt
            row["recorded_completion_tokens"] += completion
            continue
        row["model_calls"] += 1
        row["prompt_tokens"] += prompt
        row["completion_tokens"] += completion
        price = settings.prices.get(call.get("model", ""))
        if price is not None:
            row["cost"] += (prompt * price.prompt + completion * price.completion) / 1e6
    return table


USAGE_KEYS = ("calls", "model_calls", "replayed", "prompt_tokens", "completion_tokens", "recorded_prompt_tokens",
              "recorded_completion_tokens", "cost")


def usage_by_agent(usage: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The per-step table of usage_by_step summed over steps: {agent: {key: total}}."""
    agents: dict[str, dict[str, float]] = {}
    for per_agent in usage.values():
        for agent, row in per_agent.items():
            total = agents.setdefault(agent, dict.fromkeys(USAGE_KEYS, 0))
            for key, value in row.items():
                total[key] += value
    return dict(sorted(agents.items()))


def missing_step_error(run: RunDir, step: int, steps: list[int]) -> InputError:
    have = f"the run has steps {describe_steps(steps)}" if steps else "the run has no steps yet"
    return InputError(run.path / "steps", f"step {step} does not exist; {have}")


def describe_steps(steps: list[int]) -> str:
    """0-5, 8, 10-12: runs of consecutive steps as ranges."""
    runs: list[list[int]] = []
    for s in sorted(steps):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


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
        "rationale": update.rationale if update else None,
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
    if step is not None and step not in steps:
        raise missing_step_error(run, step, steps)
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
            "model_calls": sum(r["model_calls"] for a in usage.values() for r in a.values()),
            "recorded_calls": sum(r["replayed"] for a in usage.values() for r in a.values()),
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
        if detail["rubric_version"] is not None:
            rubric = run.load_rubric(detail["rubric_version"])
            detail["rubric"] = [c.model_dump(mode="json") | {"anchor": c in rubric.anchors} for c in rubric.criteria]
        detail["usage"] = usage.get(str(step), {})
        detail["stale"] = stale_files(run, step)
        result["detail"] = detail
    return result
