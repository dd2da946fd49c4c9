"""Runs side by side: reward per step, rubric size, strategies, tokens, calls made vs reused.

Mean rewards of two runs are comparable at a step only when both scored it with the same rubric
(the same criteria, kinds and weights). Ablation arms evolve different rubrics, so from their
first differing update on their rewards measure different things: `comparable` says so per step.
"""

from __future__ import annotations

from statistics import fmean
from typing import Any

from amaris_cli import artifacts
from amaris_cli.jsonio import iter_jsonl
from amaris_cli.rundir import RunDir


def _rubric_key(run: RunDir, version: int, instance_id: str | None) -> str:
    """The content of a rubric that matters for rewards (not its version number or provenance)."""
    path = run.rubric_path(version, instance_id)
    rubric = run.load_rubric(version, instance_id if path.exists() else None)
    return artifacts.digest([[c.id, c.text, c.kind, c.weight] for c in rubric.criteria])


def run_figures(run: RunDir) -> dict[str, Any]:
    run.require()
    mean_reward: dict[str, float | None] = {}
    rubrics: dict[str, list[str]] = {}
    strategies: dict[str, int] = {}
    updates = []
    for step in artifacts.step_numbers(run):
        scores = artifacts.load_scores(run, step)
        rewards = [s.reward for s in scores if s.status == "scored" and s.reward is not None]
        mean_reward[str(step)] = round(fmean(rewards), 6) if rewards else None
        rubrics[str(step)] = sorted({_rubric_key(run, s.rubric_version, s.instance_id)
                                     for s in scores if s.rubric_version is not None})
        update = artifacts.load_update(run, step)
        if update is not None:
            updates.append(update)
            strategies[update.strategy] = strategies.get(update.strategy, 0) + 1
    from amaris_cli.stability import stability

    versions = run.rubric_versions()
    stable = stability(run.load_rubric(0), updates) if versions else None
    size = len(run.load_rubric(versions[-1]).criteria) if versions else 0
    tokens = made = reused = 0
    for call in iter_jsonl(run.calls_path):
        if call.get("source", "model") != "model":
            reused += 1
            continue
        made += 1
        usage = call.get("usage") or {}
        tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    return {"run": str(run.path), "mean_reward": mean_reward, "rubrics": rubrics, "final_rubric_size": size,
            "rubric_versions": len(versions), "strategies": strategies, "tokens": tokens, "calls_made": made,
            "calls_reused": reused, "edits": stable.edits if stable else 0,
            "reversals": stable.reversals if stable else 0,
            "stability": stable.model_dump(mode="json") if stable else None}


def compare_runs(runs: list[RunDir]) -> dict[str, Any]:
    figures = [run_figures(r) for r in runs]
    steps = sorted({s for f in figures for s in f["mean_reward"]}, key=int)
    comparable = {s: all(s in f["rubrics"] for f in figures) and len({tuple(f["rubrics"][s]) for f in figures}) == 1
                  for s in steps}
    return {"runs": figures, "comparable": comparable}
