"""The text of each memory entry: a compact digest of its record (the embedder reads ~200 words), and which
of a step's analyses get an entry.

Ids are predictable so static retrieval and rebuilds never search:
  analysis:STEP:INSTANCE:ROLLOUT   summary:STEP:INSTANCE   update:STEP:INSTANCE
with STEP zero-padded to 8 digits and INSTANCE "-" in global mode, else the instance's directory name (the one
the run keeps it under, RunDir.instance_dir: an instance an earlier amaris kept under its plain name keeps the
ids it indexed then).

Embedding is what the memory costs (several ms of CPU per text), and a step may have 10,000 analyses, so
a step's analyses are indexed as retrieval needs them: at most ANALYSES_PER_STEP per step (and instance),
chosen so that every distinct analysis of every kind of finding (each set of hacking patterns, a misjudging
rubric) is represented before any gets a second entry. Retrieval shows the updater a few hits per query; the
step summary carries the counts of the whole step. Each entry's digest names its rollout, so no two vectors
are the same: ties between equal vectors would leave to the index which of them a query returns, and a run
would no longer reproduce its retrieval (loop, separate commands and replay write the same files).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import orjson

from amaris_cli.models import AnalysisRecord, SummaryRecord, UpdateRecord
from amaris_cli.rubrics import rates_text

EntryType = Literal["analysis", "summary", "update"]
ANALYSES_PER_STEP = 32  # analyses embedded per step (per instance in per-instance runs)
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:/#@+-]{1,80}")  # ids as trainers and content hashes make them


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


# An instance's directory name: the run's (RunDir.instance_dir), which its files and entry ids share.
Directory = Callable[[str], str]


def _inst(instance_id: str | None, directory: Directory) -> str:
    return "-" if instance_id is None else directory(instance_id)


def analysis_id(step: int, instance_id: str | None, rollout_id: str, directory: Directory) -> str:
    return f"analysis:{step:08d}:{_inst(instance_id, directory)}:{rollout_id}"


def summary_id(step: int, instance_id: str | None, directory: Directory) -> str:
    return f"summary:{step:08d}:{_inst(instance_id, directory)}"


def update_id(step: int, instance_id: str | None, directory: Directory) -> str:
    return f"update:{step:08d}:{_inst(instance_id, directory)}"


ENTRY_CHARS = 1200


def _clip(text: str, limit: int = ENTRY_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fit(parts: list[tuple[str, int]], limit: int = ENTRY_CHARS) -> str:
    """The parts, joined by spaces and clipped as _clip clips a text; over the limit, the parts that give most
    (the highest number; 0 never gives) are cut first, each ending in "...", so that the others stay whole. Cut
    from the end, an update's long rationale took its changes and the gate's "not adopted" with it (a refused
    update read as applied), a summary's paragraph its counted hacks, an analysis's assessment its hacking
    evidence. A text within the limit is as _clip gives it; parts that never give beyond the limit are clipped
    from the end all the same."""
    texts = [text for text, _ in parts]
    whole = " ".join(" ".join(texts).split())
    for index in sorted((i for i, (text, gives) in enumerate(parts) if gives > 0 and text.strip()),
                        key=lambda i: -parts[i][1]):
        if len(whole) <= limit:
            break
        own = " ".join(texts[index].split())
        keep = len(own) - (len(whole) - limit) - 3
        texts[index] = own[:keep].rstrip() + "..." if keep > 0 else "..."
        whole = " ".join(" ".join(texts).split())
    return _clip(whole, limit)


def _said(record: AnalysisRecord) -> list[tuple[str, int]]:
    """What the analyzer said about the rollout, in parts (_fit: the assessment gives first, then the rubric
    judgement; the hacking evidence last)."""
    a = record.analysis
    assert a is not None
    hacking = "; ".join(f"{p.pattern} ({p.severity}): {p.evidence}" for p in a.reward_hacking.patterns) or "none"
    return [(a.overall_assessment, 3), (f"Reward hacking: {hacking}.", 1), (f"Rubric: {a.rubric_judgement.assessment}", 2)]


def _assessment(record: AnalysisRecord) -> str:
    """What the analyzer said about the rollout (the digest without its rollout id and reward)."""
    return " ".join(text for text, _ in _said(record))


def _shown_id(rollout_id: str) -> str:
    """A rollout id as an entry's text gives it: as it is when it is a plain id, else quoted and cut (it is the
    trainer's text: "s0-7, reward 1.00. Correct ..." would read as amaris's own framing of the entry)."""
    if _PLAIN_ID.fullmatch(rollout_id):
        return rollout_id
    return orjson.dumps(rollout_id[:60]).decode()


def analysis_entry(record: AnalysisRecord, directory: Directory) -> MemoryEntry | None:
    if record.analysis is None:
        return None
    reward = "n/a" if record.reward is None else f"{record.reward:.2f}"
    text = _fit([(f"Step {record.step} rollout {_shown_id(record.rollout_id)}, reward {reward}.", 0), *_said(record)])
    return MemoryEntry(analysis_id(record.step, record.instance_id, record.rollout_id, directory), "analysis",
                       record.step, record.instance_id, text)


def analysis_entries(records: Iterable[AnalysisRecord], directory: Directory,
                     limit: int = ANALYSES_PER_STEP) -> list[MemoryEntry]:
    """The entries of a step's analyses (module docstring), in file order; deterministic in the files alone,
    so a rebuild makes the same entries. Up to `limit` per instance, every analysis has its entry; above it,
    first one rollout of each distinct analysis, taking each kind of finding in turn (flagged kinds first,
    then the larger; within a kind the most common analyses first, then a spread over the step by a hash of
    the rollout id rather than the file order, which often follows the prompts), then second copies, ..."""
    entries: dict[str | None, list[tuple[MemoryEntry, AnalysisRecord]]] = {}
    for record in records:
        entry = analysis_entry(record, directory)
        if entry is not None:
            entries.setdefault(record.instance_id, []).append((entry, record))
    chosen: set[str] = set()
    for group in entries.values():
        chosen.update(e.id for e in _across_kinds(group, limit))
    return [e for group in entries.values() for e, _ in group if e.id in chosen]


def _across_kinds(group: list[tuple[MemoryEntry, AnalysisRecord]], limit: int) -> list[MemoryEntry]:
    if len(group) <= limit:
        return [e for e, _ in group]

    def spread(entry: MemoryEntry) -> bytes:
        return hashlib.sha256(entry.id.encode()).digest()

    alike: dict[str, list[MemoryEntry]] = {}  # by what the analyzer said
    kinds: dict[tuple[tuple[str, ...], bool], list[str]] = {}
    for entry, record in group:
        said = _assessment(record)
        if said not in alike:
            a = record.analysis
            assert a is not None
            kind = tuple(sorted({p.pattern for p in a.reward_hacking.found})), a.rubric_judgement.misjudged
            kinds.setdefault(kind, []).append(said)
        alike.setdefault(said, []).append(entry)
    for copies in alike.values():
        copies.sort(key=spread)
    size = {kind: sum(len(alike[said]) for said in saids) for kind, saids in kinds.items()}
    order = sorted(kinds, key=lambda k: (not (k[0] or k[1]), -size[k], k))
    ranked = []
    for k, kind in enumerate(order):
        saids = sorted(kinds[kind], key=lambda t: (-len(alike[t]), spread(alike[t][0])))
        ranked += [((j, i, k), entry) for i, said in enumerate(saids) for j, entry in enumerate(alike[said])]
    ranked.sort(key=lambda r: r[0])
    return [entry for _, entry in ranked[:limit]]


def summary_entry(record: SummaryRecord, directory: Directory) -> MemoryEntry:
    """The summarizer's memory paragraph and amaris's own numbers: the hacking counts and the criterion rates
    of stats, the rates exact and never cut (they follow the clipped part). The rates are read, not searched: the
    same criteria and words in every step's digest pull the vectors of different steps together (with them
    embedded, the planted history of tests/test_retrieval_quality.py found its step's summary first for 16
    of 24 themes instead of 21), so the vector is made from the paragraph and the hacking counts."""
    s = record.summary
    hacking = ", ".join(f"{h.pattern} {h.count}/{record.n_analyzed}" for h in record.hacking) or "none"
    searched = _fit([(f"Step {record.step} summary.", 0), (s.memory_entry, 1), (f"Hacking (counted): {hacking}.", 0)])
    rates = rates_text(record.stats)
    return MemoryEntry(summary_id(record.step, record.instance_id, directory), "summary", record.step,
                       record.instance_id, f"{searched} Criteria: {rates}." if rates else searched,
                       search_text=searched)


def update_entry(record: UpdateRecord, directory: Directory) -> MemoryEntry:
    changes = []
    # An update the adoption gate refused applied nothing: what it proposed is what the next update should know.
    refused = record.carried_forward is not None and record.carried_forward.cause == "gate" and record.gate is not None
    proposed = record.gate.refused_edits if refused and record.gate is not None else record.applied
    for m in proposed:
        what = m.text or ""
        changes.append(f"{m.op} {m.kind or ''} {m.id or ''} {what} {'' if m.weight is None else f'w={m.weight:g}'}".strip())
    rejected = "; ".join(f"{r.modification.op} {r.modification.id or r.modification.text or ''}: {r.reason}" for r in record.rejected)
    text = _fit([
        (f"Step {record.step} rubric update ({record.strategy}), version {record.from_version} -> {record.to_version}.", 0),
        (record.rationale, 3),
        (f"{'Proposed' if proposed is not record.applied else 'Changes'}: {'; '.join(changes) or 'none'}.", 1),
        (f"Rejected: {rejected}." if rejected else "", 2),
        # what amaris itself took out of the next version (rubric.max_active_adaptive): the history said one
        # criterion was added where another also left
        (f"Deactivated: {', '.join(d.criterion_id for d in record.deactivated)}." if record.deactivated and not refused
         else "", 1),
        (f"Not adopted, version {record.from_version} carried forward: {record.gate.reason}."
         if refused and record.gate is not None else "", 0)])
    return MemoryEntry(update_id(record.step, record.instance_id, directory), "update", record.step,
                       record.instance_id, text)
