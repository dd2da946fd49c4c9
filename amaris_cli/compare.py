"""Runs side by side: reward per step, rubric size, strategies, tokens, calls made vs reused."""

from __future__ import annotations

from statistics import fmean
from typing import Any

from amaris_cli.jsonio import iter_jsonl
from amaris_cli.records import load_scores, load_update, step_numbers
from amaris_cli.rundir import RunDir


def run_figures(run: RunDir) -> dict[str, Any]:
    run.require()
    mean_reward: dict[str, float | None] = {}
    strategies: dict[str, int] = {}
    for step in step_numbers(run):
        rewards = [s.reward for s in load_scores(run, step) if s.status == "scored" and s.reward is not None]
        mean_reward[str(step)] = round(fmean(rewards), 6) if rewards else None
        update = load_update(run, step)
        if update is not None:
            strategies[update.strategy] = strategies.get(update.strategy, 0) + 1
    from amaris_cli.stability import stability

    updates = [u for step in step_numbers(run) if (u := load_update(run, step)) is not None]
    stable = stability(run.load_rubric(0), updates) if run.rubric_versions() else None
    versions = run.rubric_versions()
    size = len(run.load_rubric(versions[-1]).criteria) if versions else 0
    tokens = made = reused = 0
    for call in iter_jsonl(run.calls_path):
        usage = call.get("usage") or {}
        tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        if call.get("source") == "replay":
            reused += 1
        else:
            made += 1
    return {"run": str(run.path), "mean_reward": mean_reward, "final_rubric_size": size, "rubric_versions": len(versions),
            "strategies": strategies, "tokens": tokens, "calls_made": made, "calls_reused": reused,
            "edits": stable.edits if stable else 0, "reversals": stable.reversals if stable else 0,
            "stability": stable.model_dump(mode="json") if stable else None}


def compare_runs(runs: list[RunDir]) -> dict[str, Any]:
    return {"runs": [run_figures(r) for r in runs]}
