"""Runs side by side: reward per step, rubric size, strategies, tokens, calls made vs reused.

Mean rewards of two runs are comparable at a step only when both scored the same rollouts with the same
judge (the scorer's prompt and answer settings: model, sampling, ...) and the same rubric (the same criteria,
kinds and weights), and their means cover the same rollouts: a rollout the judge could not score is left out of
its run's mean, so when failures differ the means are over different rollouts. Ablation arms evolve different
rubrics, so from their first differing update on their rewards measure different things: `comparable` says so
per step, and `why_not_comparable` why.
"""

from __future__ import annotations

from functools import cache, partial
from typing import Any

from amaris_cli import artifacts
from amaris_cli.artifacts import Derivation
from amaris_cli.display import count, distinct_names
from amaris_cli.reader import RunReader
from amaris_cli.rundir import RunDir


def _rubric_key(run: RunDir, version: int, instance_id: str | None) -> str:
    """The content of a rubric that matters for rewards (not its version number or provenance)."""
    path = run.rubric_path(version, instance_id)
    rubric = run.load_rubric(version, instance_id if path.exists() else None)
    return artifacts.digest([[c.id, c.text, c.kind, c.weight] for c in rubric.criteria])


def _judge_key(made: Derivation | None) -> str | None:
    """What the step's rewards depend on besides the rollouts and the rubric: the scorer agents' prompts and
    answer settings (model, sampling), the grouping, the text limit and the training context the scorer reads, as
    its scores.jsonl (`made`) was made with."""
    if made is None:
        return None
    return artifacts.digest([made.inputs.get(k) for k in ("agents", "group", "max_text_chars", "training")])


def run_figures(run: RunDir) -> dict[str, Any]:
    reader = RunReader(run)
    mean_reward: dict[str, float | None] = {}
    rubrics: dict[str, list[str]] = {}
    strategies: dict[str, int] = {}
    updates = []
    stale: dict[str, list[str]] = {}
    rollouts: dict[str, str | None] = {}
    judges: dict[str, str | None] = {}
    failed: dict[str, int] = {}
    scored: dict[str, int] = {}
    scored_rollouts: dict[str, str] = {}  # the rollouts the step's mean is over (its scored ones), as a digest
    # each rubric read once: a step's every score names its rubric, and most steps share theirs with others
    rubric_key = cache(partial(_rubric_key, run))
    for step in reader.steps:
        # read once: in a per-instance run it names every instance's files
        provenance = artifacts.read_provenance(run, step)
        files = provenance.files
        stored = files.get(artifacts.ROLLOUTS)  # (its hash, recorded as it was written)
        rollouts[str(step)] = stored.sha256 if stored is not None else None
        judges[str(step)] = _judge_key(files.get(artifacts.SCORES))
        scores = reader.scores(step)
        rewards = reader.rewards(step)
        mean_reward[str(step)] = rewards.mean
        failed[str(step)], scored[str(step)] = rewards.failed, rewards.scored
        scored_rollouts[str(step)] = artifacts.digest(sorted(s.rollout_id for s in scores
                                                             if s.status == "scored" and s.reward is not None))
        # (the files the figures here read: a downstream file made from an edited one is stale too, but says no more)
        if changed := artifacts.stale_files(run, step, provenance,
                                            among=(artifacts.ROLLOUTS, artifacts.SCORES)):
            stale[str(step)] = changed
        rubrics[str(step)] = sorted({rubric_key(version, instance) for version, instance in
                                     {(s.rubric_version, s.instance_id) for s in scores if s.rubric_version is not None}})
        # every update of the step: the global one, or each instance's in per-instance mode (whose edits and
        # reversals were left out: 0 edits for a run whose every instance rubric was edited)
        for update in reader.step_updates(step):
            updates.append(update)
            strategies[update.strategy] = strategies.get(update.strategy, 0) + 1
    from amaris_cli.stability import stability

    versions = run.rubric_versions()
    stable = stability(run.load_rubric(0), [u for u in updates if u.instance_id is None]) if versions else None
    # each instance's rubric is its own lineage: an edit undoes an earlier edit of the same rubric only
    lineages = sorted({u.instance_id for u in updates if u.instance_id is not None})
    own = {iid: stability(run.load_rubric(0, iid if run.rubric_path(0, iid).exists() else None),
                          [u for u in updates if u.instance_id == iid]) for iid in lineages} if versions else {}
    size = len(run.load_rubric(versions[-1]).criteria) if versions else 0
    # A per-instance run's instances are scored with their own rubrics (the global one stays at version 0 while they
    # evolve): the size of each instance's latest rubric, its own or, before it has one, the global one it is scored with.
    instances = sorted({s.instance_id for step in reader.steps for s in reader.scores(step) if s.instance_id is not None}) \
        if reader.settings.pipeline.per_instance else []
    instance_sizes = {iid: len(run.load_rubric(listed[-1], iid).criteria) if (listed := run.rubric_versions(iid))
                      else size for iid in instances}
    totals = reader.usage_totals()
    tokens, made, reused = totals["prompt_tokens"] + totals["completion_tokens"], totals["model_calls"], \
        totals["recorded_calls"]
    return {"run": str(run.path), "mean_reward": mean_reward, "stale": stale, "rubrics": rubrics, "rollouts": rollouts,
            "judges": judges, "failed": failed, "scored": scored, "scored_rollouts": scored_rollouts,
            "final_rubric_size": size, "instance_rubric_sizes": instance_sizes,
            "rubric_versions": len(versions), "strategies": strategies, "tokens": tokens, "calls_made": made,
            "calls_reused": reused, "edits": (stable.edits if stable else 0) + sum(o.edits for o in own.values()),
            "reversals": (stable.reversals if stable else 0) + sum(o.reversals for o in own.values()),
            "stability": stable.model_dump(mode="json") if stable else None,
            "instance_stability": {iid: o.model_dump(mode="json") for iid, o in own.items()}}


def compare_runs(runs: list[RunDir]) -> dict[str, Any]:
    figures = [run_figures(r) for r in runs]
    steps = sorted({s for f in figures for s in f["mean_reward"]}, key=int)
    names = distinct_names([f["run"] for f in figures])
    why = {s: not_comparable(figures, s, names) for s in steps}
    return {"runs": figures, "comparable": {s: w is None for s, w in why.items()}, "why_not_comparable": why}


def not_comparable(figures: list[dict[str, Any]], step: str, names: list[str] | None = None) -> str | None:
    """Why the runs' mean rewards at a step (run_figures) do not measure the same thing, or None; `names` name the
    runs in it (their paths by default)."""
    if not all(step in f["rubrics"] for f in figures):
        return "not in every run"
    reasons = [why] if (why := _differs(figures, step)) else []
    if failures := failed_apart(figures, step, names):
        reasons.append(failures)
    return "; ".join(reasons) or None


def _differs(figures: list[dict[str, Any]], step: str) -> str | None:
    if any(step in f.get("stale", {}) for f in figures):
        # A figure read from a file edited since written, or made from one that changed, is not what amaris wrote
        # (the run's cell is marked; `inspect RUN --step N` and the JSON's `stale` name the files).
        return "stale"
    # (a run whose step does not say, made by an earlier version, is not told apart by it)
    if len({key for f in figures if (key := f.get("rollouts", {}).get(step)) is not None}) > 1:
        return "rollouts differ"
    if len({key for f in figures if (key := f.get("judges", {}).get(step)) is not None}) > 1:
        return "judges differ"
    return None if len({tuple(f["rubrics"][step]) for f in figures}) == 1 else "rubrics differ"


def failed_apart(figures: list[dict[str, Any]], step: str, names: list[str] | None = None) -> str | None:
    """The runs' failed rollouts at a step when their means are over different rollouts (a mean leaves out the
    rollouts the judge could not score, under --on-error skip or neutral): "3 rollouts failed in A, 0 in B"."""
    if not any(f["failed"].get(step) for f in figures) or len({f["scored_rollouts"].get(step) for f in figures}) <= 1:
        return None
    names = names or [f["run"] for f in figures]
    counts = [f["failed"].get(step, 0) for f in figures]
    first = f"{count(counts[0], 'rollout')} failed in {names[0]}"
    return ", ".join([first, *(f"{n} in {name}" for n, name in zip(counts[1:], names[1:], strict=True))])


def failed_alike(figures: list[dict[str, Any]], step: str) -> int:
    """How many rollouts failed at the step in every run, when the runs' means are over the same rollouts (0 else)."""
    if not all(step in f["scored_rollouts"] for f in figures) or failed_apart(figures, step) is not None:
        return 0
    return min(f["failed"][step] for f in figures)
