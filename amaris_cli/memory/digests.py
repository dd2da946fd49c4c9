"""The text of each memory entry: a compact digest of its record (the embedder reads ~200 words).

Ids are predictable so static retrieval and rebuilds never search:
  analysis:STEP:INSTANCE:ROLLOUT   summary:STEP:INSTANCE   update:STEP:INSTANCE
with STEP zero-padded to 8 digits and INSTANCE "-" in global mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from amaris_cli.models import AnalysisRecord, SummaryRecord, UpdateRecord
from amaris_cli.rubrics import rates_text
from amaris_cli.rundir import safe_instance_dir

EntryType = Literal["analysis", "summary", "update"]


@dataclass(frozen=True)
class MemoryEntry:
    id: str
    type: EntryType
    step: int
    instance_id: str | None
    text: str  # what a reader (the updater, `memory search`) gets
    search_text: str | None = None  # what is embedded, when not the whole text

    @property
    def embedded(self) -> str:
        return self.text if self.search_text is None else self.search_text


def _inst(instance_id: str | None) -> str:
    return "-" if instance_id is None else safe_instance_dir(instance_id)


def analysis_id(step: int, instance_id: str | None, rollout_id: str) -> str:
    return f"analysis:{step:08d}:{_inst(instance_id)}:{rollout_id}"


def summary_id(step: int, instance_id: str | None) -> str:
    return f"summary:{step:08d}:{_inst(instance_id)}"


def update_id(step: int, instance_id: str | None) -> str:
    return f"update:{step:08d}:{_inst(instance_id)}"


def _clip(text: str, limit: int = 1200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def analysis_entry(record: AnalysisRecord) -> MemoryEntry | None:
    a = record.analysis
    if a is None:
        return None
    reward = "n/a" if record.reward is None else f"{record.reward:.2f}"
    hacking = "; ".join(f"{p.pattern} ({p.severity}): {p.evidence}" for p in a.reward_hacking.patterns) or "none"
    text = (f"Step {record.step} rollout {record.rollout_id}, reward {reward}. {a.overall_assessment} "
            f"Reward hacking: {hacking}. Rubric: {a.rubric_judgement.assessment}")
    return MemoryEntry(analysis_id(record.step, record.instance_id, record.rollout_id), "analysis", record.step,
                       record.instance_id, _clip(text))


def summary_entry(record: SummaryRecord) -> MemoryEntry:
    """The summarizer's memory paragraph and amaris's own numbers: the hacking counts and the criterion rates
    of stats, the rates exact and never cut (they follow the clipped part). The rates are read, not searched: the
    same criteria and words in every step's digest pull the vectors of different steps together (with them
    embedded, the planted history of tests/test_retrieval_quality.py found its step's summary first for 16
    of 24 themes instead of 21), so the vector is made from the paragraph and the hacking counts."""
    s = record.summary
    hacking = ", ".join(f"{h.pattern} {h.count}/{record.n_analyzed}" for h in record.hacking) or "none"
    searched = _clip(f"Step {record.step} summary. {s.memory_entry} Hacking (counted): {hacking}.")
    rates = rates_text(record.stats)
    return MemoryEntry(summary_id(record.step, record.instance_id), "summary", record.step, record.instance_id,
                       f"{searched} Criteria: {rates}." if rates else searched, search_text=searched)


def update_entry(record: UpdateRecord) -> MemoryEntry:
    changes = []
    # An update the adoption gate refused applied nothing: what it proposed is what the next update should know.
    refused = record.carried_forward is not None and record.carried_forward.cause == "gate" and record.gate is not None
    proposed = record.gate.refused_edits if refused and record.gate is not None else record.applied
    for m in proposed:
        what = m.text or ""
        changes.append(f"{m.op} {m.kind or ''} {m.id or ''} {what} {'' if m.weight is None else f'w={m.weight:g}'}".strip())
    rejected = "; ".join(f"{r.modification.op} {r.modification.id or r.modification.text or ''}: {r.reason}" for r in record.rejected)
    text = (f"Step {record.step} rubric update ({record.strategy}), version {record.from_version} -> {record.to_version}. "
            f"{record.rationale} {'Proposed' if proposed is not record.applied else 'Changes'}: "
            f"{'; '.join(changes) or 'none'}."
            + (f" Rejected: {rejected}." if rejected else "")
            + (f" Not adopted, version {record.from_version} carried forward: {record.gate.reason}."
               if refused and record.gate is not None else ""))
    return MemoryEntry(update_id(record.step, record.instance_id), "update", record.step, record.instance_id, _clip(text))
