"""Rubric sets: the scoring arithmetic, per-criterion statistics, and applying updates.

The reward of one rollout, with verdicts v in [0, 1] and positive weights w:

    reward = clip( (sum_{reward c} w_c v_c  -  sum_{pitfall c} w_c v_c) / sum_{reward c} w_c , 0, 1 )

With no pitfall criteria this is the weight-normalized sum of the verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import fmean, pstdev
from typing import Literal

from pydantic import ValidationError

from amaris_cli.config import RubricSettings
from amaris_cli.criteria import clean_criterion_text, criterion_id_problem, criterion_text_problem, derived_id
from amaris_cli.errors import ConfigError
from amaris_cli.figures import reward_figures
from amaris_cli.models import (
    Criterion,
    CriterionStats,
    Deactivated,
    Modification,
    RejectedModification,
    RubricSet,
    ScoreRecord,
    StepStats,
    Verdict,
)

REWARD_DECIMALS = 6


def compute_reward(rubric: RubricSet, verdicts: Iterable[Verdict]) -> float:
    """The reward formula above. Every criterion of the rubric must have a verdict."""
    by_id = {v.criterion_id: v.score for v in verdicts}
    missing = [c.id for c in rubric.criteria if c.id not in by_id]
    if missing:
        raise ValueError(f"no verdict for criteria: {', '.join(missing)}")
    gained = sum(c.weight * by_id[c.id] for c in rubric.criteria if c.kind == "reward")
    lost = sum(c.weight * by_id[c.id] for c in rubric.criteria if c.kind == "pitfall")
    possible = sum(c.weight for c in rubric.criteria if c.kind == "reward")
    return round(min(1.0, max(0.0, (gained - lost) / possible)), REWARD_DECIMALS)


def bounds_problem(settings: RubricSettings, adaptive: Sequence[Criterion]) -> str | None:
    """Why a rubric's initial adaptive criteria break the bounds updates keep (their number, their weights), or
    None: one rule for the run's rubric and for each instance's own."""
    if len(adaptive) > settings.max_adaptive:
        return f"{len(adaptive)} initial adaptive criteria exceed rubric.max_adaptive={settings.max_adaptive}"
    for c in adaptive:
        if not settings.min_weight <= c.weight <= settings.max_weight:
            return f"adaptive criterion {c.id!r}: weight {c.weight} outside [{settings.min_weight}, {settings.max_weight}]"
    return None


def initial_rubric(settings: RubricSettings, source: str = "config") -> RubricSet:
    if not settings.anchors:
        raise ConfigError(f"{source}: no anchor criteria: give them as [[rubric.anchors]] tables of a --config file "
                          "(the repository's examples/amaris.toml is one) or as --anchor 'TEXT' flags, one per criterion")
    if problem := bounds_problem(settings, settings.adaptive):
        raise ConfigError(f"{source}: {problem}")
    try:
        rubric = RubricSet(version=0, anchors=settings.anchors, adaptive=settings.adaptive)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{source}: rubric: {reason}") from None
    # The scorer reads these texts among its instructions, as it reads the updater's: the same checks.
    for section, criteria in (("anchors", settings.anchors), ("adaptive", settings.adaptive)):
        for c in criteria:
            if problem := criterion_text_problem(c.text, c.kind):
                raise ConfigError(f"{source}: rubric.{section}: criterion {c.id!r}: {problem}")
    return rubric.model_copy(update={
        "anchors": [c.model_copy(update={"text": clean_criterion_text(c.text)}) for c in rubric.anchors],
        "adaptive": [c.model_copy(update={"text": clean_criterion_text(c.text)}) for c in rubric.adaptive]})


def _norm_text(text: str) -> str:
    return " ".join(text.lower().split())


def apply_modifications(
    rubric: RubricSet,
    modifications: Sequence[Modification],
    bounds: RubricSettings,
    new_version: int,
    step: int,
) -> tuple[RubricSet, list[Modification], list[RejectedModification]]:
    """Apply the updater's edits one by one; an edit that breaks a rule is rejected with the
    reason and the rest still apply. Anchors never change. A text or id the updater writes (add, modify)
    enters the scorer's system message, so it passes the trust boundary first (`criteria`: normalized,
    then checked for length, markers, placeholders, look-alike spellings, instructions to the judge and
    verdict prescriptions); the cleaned text is what the rubric holds. An added criterion's id is the
    updater's when it gives a valid one, else derived from the text.
    Two edits of one criterion that would both apply and disagree (two weights, two texts, a removal and an
    edit) are both rejected: which one the updater meant cannot be told (the last one was applied silently)."""
    left_out: list[Modification] = []
    reasons: dict[int, str] = {}  # a left-out edit that the pass leaving it out refused on its own keeps that reason
    # Each pass that finds a conflict leaves out one more criterion's edits, so this ends; a later pass can apply
    # edits an earlier one refused (a share bound met once a conflicting edit is out), which may disagree in turn.
    for _ in range(len(modifications) + 1):
        kept = [m for m in modifications if not any(m is out for out in left_out)]
        new, applied, rejected, after_removal = _apply_each(rubric, kept, bounds, new_version, step)
        if not (twice := _conflicting([*applied, *(m for m in after_removal if m.op != "remove")])):
            break
        out = [m for m in kept if m.op != "add" and m.id in twice]
        own = {id(r.modification): r.reason for r in rejected}
        reasons.update({id(m): own[id(m)] for m in out if id(m) in own})
        left_out += out
    reasons.update({id(r.modification): r.reason for r in rejected})  # the last pass's count
    # what is left after a removal is a second removal (an edit after one disagrees with it, and is left out)
    reasons.update({id(m): f"{m.id!r} is removed by an earlier edit of this update" for m in after_removal})
    for mod in left_out:
        reasons.setdefault(id(mod), f"the update edits {mod.id!r} {sum(m.id == mod.id for m in left_out)} times, and "
                                    "the edits disagree; which one is meant is ambiguous: give one edit per criterion")
    refused = {id(m) for m in [*left_out, *after_removal]} | {id(r.modification) for r in rejected}
    return new, applied, [RejectedModification(modification=m, reason=reasons[id(m)]) for m in modifications
                          if id(m) in refused]


def _conflicting(applied: list[Modification]) -> set[str]:
    """The criteria that two applied edits change in different ways (a removal and an edit, two weights, ...)."""
    by_id: dict[str, list[Modification]] = {}
    for mod in applied:
        if mod.op != "add" and mod.id is not None:
            by_id.setdefault(mod.id, []).append(mod)
    return {criterion for criterion, mods in by_id.items() if len(mods) > 1 and (
        any(m.op == "remove" for m in mods)
        or any(len({getattr(m, field) for m in mods if getattr(m, field) is not None}) > 1
               for field in ("text", "weight", "kind")))}


def _apply_each(rubric: RubricSet, modifications: Sequence[Modification], bounds: RubricSettings, new_version: int,
                step: int) -> tuple[RubricSet, list[Modification], list[RejectedModification], list[Modification]]:
    """The edits applied one by one (apply_modifications), and the edits of a criterion an earlier edit of the
    update removed: neither applied nor refused here (an edit disagrees with the removal, as a removal after it
    would; a second removal is refused only if the first one stands)."""
    anchors = {c.id for c in rubric.anchors}
    adaptive = [c.model_copy() for c in rubric.adaptive]
    applied: list[Modification] = []
    rejected: list[RejectedModification] = []
    removed: set[str] = set()
    after_removal: list[Modification] = []

    def reject(mod: Modification, reason: str) -> None:
        rejected.append(RejectedModification(modification=mod, reason=reason))

    def weight_ok(weight: float | None) -> str | None:
        if weight is None:
            return None
        if not math.isfinite(weight) or not bounds.min_weight <= weight <= bounds.max_weight:
            return f"weight {weight} outside [{bounds.min_weight}, {bounds.max_weight}]"
        return None

    def anchor_share(criteria: list[Criterion]) -> float:
        rewards = [c for c in [*rubric.anchors, *criteria] if c.kind == "reward"]
        return sum(c.weight for c in rewards if c.id in anchors) / sum(c.weight for c in rewards)

    def outweighs_anchors(edited: list[Criterion]) -> str | None:
        """Why the edited adaptive criteria leave the anchors less than rubric.min_anchor_share, or None."""
        floor = bounds.min_anchor_share
        if floor is None or (share := anchor_share(edited)) >= floor or share >= anchor_share(adaptive):
            return None  # (an edit that lowers no share already below the floor, e.g. a removal, is kept)
        return (f"would leave the anchors {share:.0%} of the reward criteria's weight, below "
                f"rubric.min_anchor_share={floor:g}")

    def replaced(index: int, edited: Criterion) -> list[Criterion]:
        return [*adaptive[:index], edited, *adaptive[index + 1:]]

    def leaves_no_reward(without: str) -> bool:
        """Whether the rubric would keep no reward criterion (the reward's denominator) without `without`."""
        return not any(c.kind == "reward" for c in [*rubric.anchors, *adaptive] if c.id != without)

    for mod in modifications:
        index = next((i for i, c in enumerate(adaptive) if c.id == mod.id), None)
        if mod.op != "add" and mod.id in anchors:
            reject(mod, f"{mod.id!r} is an anchor criterion; anchors are immutable")
            continue
        if mod.op in ("remove", "modify") and index is not None and (mod.op == "remove" or mod.kind == "pitfall") \
                and adaptive[index].kind == "reward" and leaves_no_reward(mod.id):
            reject(mod, f"{mod.id!r} is the rubric's last reward criterion: a rubric needs one (rewards are "
                   "divided by the reward criteria's weights)")
            continue
        if mod.op == "add":
            if not mod.text or not mod.text.strip():
                reject(mod, "an added criterion needs a text")
                continue
            if mod.weight is None or mod.kind is None:  # the updater's answer is re-asked first (check_additions)
                reject(mod, "an added criterion needs its weight and its kind")
                continue
            weight = mod.weight
            if problem := weight_ok(weight):
                reject(mod, problem)
                continue
            if mod.id is not None and (problem := criterion_id_problem(mod.id)):
                reject(mod, problem)
                continue
            if any(_norm_text(c.text) == _norm_text(clean_criterion_text(mod.text)) for c in [*rubric.anchors, *adaptive]):
                reject(mod, "a criterion with the same text already exists")
                continue
            if len(adaptive) >= bounds.max_adaptive:
                reject(mod, f"would exceed rubric.max_adaptive={bounds.max_adaptive} adaptive criteria")
                continue
            if problem := criterion_text_problem(mod.text, mod.kind):
                reject(mod, problem)
                continue
            taken = anchors | {c.id for c in adaptive} | removed  # a removed id names the removed criterion's history
            new_id = mod.id or derived_id(mod.text, f"s{step}")
            if mod.id is None:  # a derived id is made unique (-2, -3, ...); one the updater chose must be
                base_id, n = new_id, 1
                while new_id in taken:
                    n += 1
                    new_id = f"{base_id}-{n}"
            if new_id in taken:
                reject(mod, f"criterion id {new_id!r} " + ("names a criterion this update removes: a new criterion "
                                                          "takes an id of its own" if new_id in removed
                                                          else "already exists"))
                continue
            try:
                criterion = Criterion(id=new_id, text=clean_criterion_text(mod.text), weight=weight,
                                      kind=mod.kind)
            except ValueError as exc:
                reject(mod, f"invalid criterion: {exc.errors()[0]['msg'] if hasattr(exc, 'errors') else exc}")
                continue
            if problem := outweighs_anchors([*adaptive, criterion]):
                reject(mod, problem)
                continue
            adaptive.append(criterion)
            applied.append(mod.model_copy(update={"id": new_id, "text": criterion.text, "weight": weight,
                                                  "kind": criterion.kind}))
            continue
        if index is None and mod.id in removed:
            after_removal.append(mod)
            continue
        if index is None:
            reject(mod, f"unknown criterion id {mod.id!r}")
            continue
        current = adaptive[index]
        if mod.op == "remove":
            del adaptive[index]
            removed.add(current.id)
            applied.append(mod)
        elif mod.op == "reweight":
            if mod.weight is None:
                reject(mod, "reweight needs a weight")
                continue
            if problem := weight_ok(mod.weight):
                reject(mod, problem)
                continue
            edited = current.model_copy(update={"weight": mod.weight})
            if problem := outweighs_anchors(replaced(index, edited)):
                reject(mod, problem)
                continue
            adaptive[index] = edited
            applied.append(mod.model_copy(update={"text": None, "kind": None}))  # what a reweight applies: its weight
        else:  # modify
            if mod.text is None and mod.weight is None and mod.kind is None:
                reject(mod, "modify needs a new text, weight or kind")
                continue
            if problem := weight_ok(mod.weight):
                reject(mod, problem)
                continue
            if mod.text is not None and not mod.text.strip():
                reject(mod, "a criterion text cannot be empty")
                continue
            kind = mod.kind or current.kind
            # a new text, or a new kind for the text it has: a pitfall's text made a reward's is checked as one
            if (mod.text is not None or kind != current.kind) and \
                    (problem := criterion_text_problem(current.text if mod.text is None else mod.text, kind)):
                reject(mod, problem)
                continue
            text = None if mod.text is None else clean_criterion_text(mod.text)
            if text is not None and any(_norm_text(c.text) == _norm_text(text)
                                        for c in [*rubric.anchors, *adaptive] if c.id != current.id):
                reject(mod, "a criterion with the same text already exists")  # as for an added one
                continue
            update = {k: v for k, v in (("text", text), ("weight", mod.weight), ("kind", mod.kind)) if v is not None}
            edited = current.model_copy(update=update)
            if problem := outweighs_anchors(replaced(index, edited)):
                reject(mod, problem)
                continue
            adaptive[index] = edited
            applied.append(mod if text is None else mod.model_copy(update={"text": text}))

    result = RubricSet(
        version=new_version,
        instance_id=rubric.instance_id,
        anchors=rubric.anchors,
        adaptive=adaptive,
        produced_by_step=step,
    )
    return result, applied, rejected, after_removal


def cap_active(rubric: RubricSet, stats: StepStats | None, cap: int | None,
               measured: RubricSet | None = None) -> tuple[RubricSet, list[Deactivated]]:
    """Keep at most `cap` adaptive criteria, the most discriminative first (as DR Tulu does):
    ranked by spread within prompt groups (else across rollouts); criteria without statistics yet
    (just added) rank first, so a new criterion gets a step to show its worth. `measured`: the rubric whose
    verdicts `stats` are of; a criterion whose text or kind is not the one measured (rewritten since, or a new
    criterion under a removed one's id) has no statistics yet either: the old text's spread would drop the
    rewrite the update just made for that very spread."""
    if cap is None or len(rubric.adaptive) <= cap:
        return rubric, []

    def measured_as_now(criterion_id: str) -> bool:
        then, now = (measured.get(criterion_id) if measured else None), rubric.get(criterion_id)
        return measured is None or (then is not None and now is not None and (then.text, then.kind) == (now.text, now.kind))

    spreads = {c.criterion_id: (c.within_group_spread if c.within_group_spread is not None else c.spread)
               for c in (stats.criteria if stats else []) if measured_as_now(c.criterion_id)}
    order = {c.id: i for i, c in enumerate(rubric.adaptive)}

    def rank(c: Criterion) -> tuple[float, int]:
        spread = spreads.get(c.id)
        return (-(math.inf if spread is None else spread), order[c.id])

    ranked = sorted(rubric.adaptive, key=rank)
    keep = {c.id for c in ranked[:cap]}
    displaced: str | None = None
    kept_reward = any(c.kind == "reward" for c in rubric.anchors) or \
        any(c.kind == "reward" and c.id in keep for c in rubric.adaptive)
    if not kept_reward:
        # no reward anchor, and every kept criterion a pitfall: the best reward criterion (the rubric has one) stays
        # in place of the last kept one (above a cap of 0): a rubric without one has no reward to give
        best = next(c for c in ranked if c.kind == "reward")
        displaced = ranked[cap - 1].id if cap > 0 else None
        keep = {c.id for c in ranked[:max(cap - 1, 0)]} | {best.id}

    def reason(c: Criterion) -> str:
        if c.id == displaced:
            return (f"rubric.max_active_adaptive={cap} keeps {c.id!r} out so that a reward criterion stays (the rubric "
                    "has no reward anchor)")
        return f"spread {spreads.get(c.id)} is among the lowest; rubric.max_active_adaptive={cap}"

    dropped = [Deactivated(criterion_id=c.id, spread=spreads.get(c.id), reason=reason(c))
               for c in rubric.adaptive if c.id not in keep]
    return rubric.model_copy(update={"adaptive": [c for c in rubric.adaptive if c.id in keep]}), dropped


# --- statistics -------------------------------------------------------------------------------


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, REWARD_DECIMALS)


def criterion_stats(criterion_id: str, kind: Literal["reward", "pitfall"], values: Sequence[tuple[str, float]],
                    groups: dict[str, str] | None = None) -> CriterionStats:
    """One criterion's mean, spread (population std), mean spread within groups of rollouts that share
    a prompt (`groups`: rollout id -> group key) and saturation (share at 1 and at 0), over its verdicts
    `values` (rollout id, verdict). The one place of this arithmetic: stats.json, inspect and report."""
    nums = [v for _, v in values]
    within: float | None = None
    if groups and nums:
        by_group: dict[str, list[float]] = {}
        for rid, v in values:
            by_group.setdefault(groups.get(rid, rid), []).append(v)
        spreads = [pstdev(vs) for vs in by_group.values() if len(vs) > 1]
        within = fmean(spreads) if spreads else None
    return CriterionStats(
        criterion_id=criterion_id,
        kind=kind,
        n=len(nums),
        mean=_r(fmean(nums)) if nums else None,
        spread=_r(pstdev(nums)) if nums else None,
        within_group_spread=_r(within),
        saturation_top=_r(sum(v >= 0.999 for v in nums) / len(nums)) if nums else None,
        saturation_bottom=_r(sum(v <= 0.001 for v in nums) / len(nums)) if nums else None,
    )


# The mean verdict of a criterion, named as the agents' prompts explain it ("for a reward criterion the
# share of credit given, for a pitfall the share of rollouts where it was present") and as inspect and
# the report label it.
RATE_NAMES: dict[str, str] = {"reward": "pass rate", "pitfall": "prevalence"}


def rates_text(stats: StepStats) -> str:
    """The step's per-criterion rates in words, exact to stats.json's digits: `ID pass rate 68.75%` for a
    reward criterion, `ID prevalence 25%` for a pitfall (higher is worse); "" when no criterion was scored."""
    rates = [f"{c.criterion_id} {RATE_NAMES[c.kind]} {round(c.mean * 100, REWARD_DECIMALS - 2):g}%"
             for c in stats.criteria if c.mean is not None]
    return f"{'; '.join(rates)} (mean verdicts of {stats.n_scored} scored rollouts)" if rates else ""


def step_stats(
    step: int, rubric: RubricSet, scores: Sequence[ScoreRecord], groups: dict[str, str] | None = None
) -> StepStats:
    """Per-criterion statistics (criterion_stats) of the rubric's criteria over the scored rollouts."""
    scored = [s for s in scores if s.status == "scored"]
    rewards = reward_figures(scores)
    criteria = [criterion_stats(c.id, c.kind, [(s.rollout_id, v.score) for s in scored for v in s.verdicts
                                               if v.criterion_id == c.id], groups)
                for c in rubric.criteria]
    return StepStats(
        step=step,
        n_rollouts=len(scores),
        n_scored=len(scored),
        n_failed=len(scores) - len(scored),
        mean_reward=rewards.mean,
        std_reward=rewards.std,
        criteria=criteria,
    )

