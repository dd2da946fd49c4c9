"""Rubric stability: edits per update, reversals, and the age of each criterion.

An edit is an applied modification that changes the rubric: an added or removed criterion, or a modify or
reweight that gives a criterion another text, weight or kind than it had. One that restates what the criterion
already is (a reweight to its own weight, a modify to its own text) is applied, and recorded in the update, but
changes nothing (the rubric's diff shows nothing): it is counted apart, as `unchanged`, never as an edit.

A reversal is an edit that undoes an earlier one:
  readded            a criterion removed earlier is added again in substance (same or near-same text)
  added_then_removed a criterion an earlier update added is removed
  weight_back        a weight moves opposite to its previous change (pushed back and forth)
The AMARIS paper's claim is that memory reduces such oscillation; `compare` over an ablation
sweep shows reversals per run side by side.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from amaris_cli.models import Modification, RubricSet, UpdateRecord

if TYPE_CHECKING:
    from amaris_cli.rundir import RunDir

_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "of", "to", "or", "and", "is", "it", "its", "in", "for", "response", "answer", "with", "that"}
SIMILAR = 0.6


class Reversal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int
    kind: Literal["readded", "added_then_removed", "weight_back"]
    criterion_id: str
    detail: str


class UpdateStability(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int
    strategy: str
    added: int = 0
    modified: int = 0
    removed: int = 0
    reweighted: int = 0
    unchanged: int = 0  # applied modifies and reweights that changed nothing (not edits)
    reversals: list[Reversal] = Field(default_factory=list)


class RunStability(BaseModel):
    model_config = ConfigDict(extra="forbid")
    updates: list[UpdateStability]
    edits: int  # added + modified + removed + reweighted: the edits that changed the rubric
    unchanged: int = 0  # applied modifies and reweights that changed nothing
    reversals: int
    reversals_by_kind: dict[str, int]
    ages: dict[str, int]  # per criterion of the newest version: the version numbers from the one it entered to it


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def similar(a: str, b: str) -> bool:
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return a.strip().lower() == b.strip().lower()
    return len(wa & wb) / len(wa | wb) >= SIMILAR


_FIELDS = ("text", "weight", "kind")


def changes(criterion: dict[str, Any] | None, m: Modification) -> bool:
    """Whether an applied modification changes the rubric, given the criterion it edits as it stands then ({text,
    weight, kind}; None: not known, which is counted as a change, as before this was told apart)."""
    if m.op in ("add", "remove") or criterion is None:
        return True
    return any(value is not None and value != criterion[f] for f, value in zip(_FIELDS, (m.text, m.weight, m.kind),
                                                                               strict=True))


def _edit(criteria: dict[str, dict[str, Any]], m: Modification) -> bool:
    """Applies `m` to `criteria` ({id: {text, weight, kind}}) and says whether it changed them."""
    cid = m.id or ""
    changed = changes(criteria.get(cid), m)
    if m.op == "add":
        criteria[cid] = {"text": m.text, "weight": m.weight if m.weight is not None else 1.0, "kind": m.kind}
    elif m.op == "remove":
        criteria.pop(cid, None)
    elif changed and cid in criteria:
        criteria[cid].update({f: v for f, v in zip(_FIELDS, (m.text, m.weight, m.kind), strict=True) if v is not None})
    return changed


def _criteria(rubric: RubricSet) -> dict[str, dict[str, Any]]:
    return {c.id: {"text": c.text, "weight": c.weight, "kind": c.kind} for c in rubric.criteria}


def rubric_edits(rubric: RubricSet, applied: Iterable[Modification]) -> list[bool]:
    """For each applied modification of an update, in order, whether it changed the rubric it edited (`rubric`)."""
    criteria = _criteria(rubric)
    return [_edit(criteria, m) for m in applied]


def update_edits(run: RunDir, update: UpdateRecord) -> list[bool]:
    """rubric_edits of an update of a run, against the rubric it edited (an instance's own, or the global one an
    instance without its own is scored with); every one counted as a change when that rubric cannot be read."""
    from amaris_cli.errors import AmarisError

    instance = update.instance_id if update.instance_id is not None and \
        run.rubric_path(update.from_version, update.instance_id).exists() else None
    try:
        rubric = run.load_rubric(update.from_version, instance)
    except AmarisError:
        return [True] * len(update.applied)
    return rubric_edits(rubric, update.applied)


def stability(initial: RubricSet, updates: list[UpdateRecord]) -> RunStability:
    criteria = _criteria(initial)  # every criterion as it stands: its text, and whether an edit changes it
    weights = {c.id: [c.weight] for c in initial.adaptive}
    added_at: dict[str, int] = {}
    born = {c.id: initial.version for c in initial.criteria}  # the first rubric version that holds it
    removed: list[tuple[str, str, int]] = []  # (text, id, step)
    per_update: list[UpdateStability] = []
    for update in sorted(updates, key=lambda u: u.step):
        u = UpdateStability(step=update.step, strategy=update.strategy)
        for m in update.applied:
            cid = m.id or ""
            before = criteria.get(cid)
            if not _edit(criteria, m):
                u.unchanged += 1
                continue
            if m.op == "add":
                u.added += 1
                text = m.text or ""
                match = next(((t, i, s) for t, i, s in removed if similar(t, text)), None)
                if match:
                    u.reversals.append(Reversal(step=update.step, kind="readded", criterion_id=cid,
                                                detail=f"re-adds {match[1]!r}, removed at step {match[2]}"))
                weights[cid] = [m.weight if m.weight is not None else 1.0]
                added_at[cid], born[cid] = update.step, update.step + 1  # step t's update writes version t + 1
            elif m.op == "remove":
                u.removed += 1
                if cid in added_at:
                    u.reversals.append(Reversal(step=update.step, kind="added_then_removed", criterion_id=cid,
                                                detail=f"added at step {added_at.pop(cid)}"))
                removed.append(((before or {}).get("text") or "", cid, update.step))
                weights.pop(cid, None)
                born.pop(cid, None)
            else:
                if m.op == "reweight":
                    u.reweighted += 1
                else:
                    u.modified += 1
                # (a weight the edit leaves as it was, e.g. a text edit that restates it, moves nothing: as a step in
                # the history it hid the move back after it, 1 -> 2 -> 2 -> 1)
                if m.weight is not None and cid in weights and m.weight != weights[cid][-1]:
                    history = weights[cid]
                    if len(history) >= 2:
                        before, last = history[-2], history[-1]
                        if (last - before) * (m.weight - last) < 0:
                            u.reversals.append(Reversal(step=update.step, kind="weight_back", criterion_id=cid,
                                                        detail=f"{before:g} -> {last:g} -> {m.weight:g}"))
                    history.append(m.weight)
        for d in update.deactivated:
            removed.append(((criteria.pop(d.criterion_id, None) or {}).get("text") or "", d.criterion_id, update.step))
            weights.pop(d.criterion_id, None)
            born.pop(d.criterion_id, None)
            added_at.pop(d.criterion_id, None)
        per_update.append(u)
    last_step = max((u.step for u in updates), default=initial.version - 1)
    kinds: dict[str, int] = {}
    for u in per_update:
        for r in u.reversals:
            kinds[r.kind] = kinds.get(r.kind, 0) + 1
    return RunStability(
        updates=per_update,
        edits=sum(u.added + u.modified + u.removed + u.reweighted for u in per_update),
        unchanged=sum(u.unchanged for u in per_update),
        reversals=sum(kinds.values()),
        reversals_by_kind=kinds,
        ages={cid: last_step + 2 - version for cid, version in sorted(born.items())},  # the newest: last_step + 1
    )
