"""Rubric stability: edits per update, reversals, and the age of each criterion.

A reversal is an edit that undoes an earlier one:
  readded            a criterion removed earlier is added again in substance (same or near-same text)
  added_then_removed a criterion an earlier update added is removed
  weight_back        a weight moves opposite to its previous change (pushed back and forth)
The AMARIS paper's claim is that memory reduces such oscillation; `compare` over an ablation
sweep shows reversals per run side by side.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from amaris_cli.models import RubricSet, UpdateRecord

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
    reversals: list[Reversal] = Field(default_factory=list)


class RunStability(BaseModel):
    model_config = ConfigDict(extra="forbid")
    updates: list[UpdateStability]
    edits: int
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


def stability(initial: RubricSet, updates: list[UpdateRecord]) -> RunStability:
    texts = {c.id: c.text for c in initial.adaptive}
    weights = {c.id: [c.weight] for c in initial.adaptive}
    added_at: dict[str, int] = {}
    born = {c.id: initial.version for c in initial.criteria}  # the first rubric version that holds it
    removed: list[tuple[str, str, int]] = []  # (text, id, step)
    per_update: list[UpdateStability] = []
    for update in sorted(updates, key=lambda u: u.step):
        u = UpdateStability(step=update.step, strategy=update.strategy)
        for m in update.applied:
            cid = m.id or ""
            if m.op == "add":
                u.added += 1
                text = m.text or ""
                match = next(((t, i, s) for t, i, s in removed if similar(t, text)), None)
                if match:
                    u.reversals.append(Reversal(step=update.step, kind="readded", criterion_id=cid,
                                                detail=f"re-adds {match[1]!r}, removed at step {match[2]}"))
                texts[cid], weights[cid] = text, [m.weight if m.weight is not None else 1.0]
                added_at[cid], born[cid] = update.step, update.step + 1  # step t's update writes version t + 1
            elif m.op == "remove":
                u.removed += 1
                if cid in added_at:
                    u.reversals.append(Reversal(step=update.step, kind="added_then_removed", criterion_id=cid,
                                                detail=f"added at step {added_at.pop(cid)}"))
                removed.append((texts.pop(cid, ""), cid, update.step))
                weights.pop(cid, None)
                born.pop(cid, None)
            else:
                if m.op == "reweight":
                    u.reweighted += 1
                else:
                    u.modified += 1
                if m.text is not None:
                    texts[cid] = m.text
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
            removed.append((texts.pop(d.criterion_id, ""), d.criterion_id, update.step))
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
        reversals=sum(kinds.values()),
        reversals_by_kind=kinds,
        ages={cid: last_step + 2 - version for cid, version in sorted(born.items())},  # the newest: last_step + 1
    )
