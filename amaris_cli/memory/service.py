"""Memory operations over a run: indexing a step's records, static and dynamic retrieval, rebuild."""

from __future__ import annotations

from amaris_cli.memory.digests import MemoryEntry, analysis_entry, summary_entry, update_entry
from amaris_cli.memory.store import MemoryStore, to_hit
from amaris_cli.models import MemoryHit, StaticEntry, SummaryRecord
from amaris_cli.records import load_analyses, load_summaries, load_summary, load_update, step_numbers
from amaris_cli.rundir import RunDir


class RunCatalog:
    """Entries of a run, derived from its files (the source of truth)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self._texts: dict[str, str] = {}

    def step_entries(self, step: int, types: tuple[str, ...] = ("analysis", "summary", "update")) -> list[MemoryEntry]:
        entries: list[MemoryEntry] = []
        if "analysis" in types:
            entries += [e for a in load_analyses(self.run, step) if (e := analysis_entry(a)) is not None]
        for summary in load_summaries(self.run, step):
            if "summary" in types:
                entries.append(summary_entry(summary))
            if "update" in types and (u := load_update(self.run, step, summary.instance_id)) is not None:
                entries.append(update_entry(u))
        for e in entries:
            self._texts[e.id] = e.text
        return entries

    def text(self, entry_id: str, step: int) -> str:
        if entry_id not in self._texts:
            self.step_entries(step)
        return self._texts.get(entry_id, "(entry no longer in the run's files)")


def index_step(store: MemoryStore, catalog: RunCatalog, step: int,
               types: tuple[str, ...] = ("analysis", "summary", "update")) -> int:
    # One add per type, in file order, so a rebuild embeds exactly the same batches.
    added = 0
    present = []
    for entry_type in types:
        entries = catalog.step_entries(step, (entry_type,))
        added += store.add(entries)
        if entries:  # only what existed is marked: records written later are still picked up
            present.append(entry_type)
    store.mark_indexed(step, present)
    return added


def _expected_types(run: RunDir, step: int) -> set[str]:
    base = run.step_dir(step)
    types = {"analysis", "summary"}
    if (base / "update.json").exists() or any((base / "instances").glob("*/update.json")):
        types.add("update")
    return types


def sync_before(store: MemoryStore, catalog: RunCatalog, step: int) -> int:
    """Index whatever earlier steps hold that the index lacks. Steps already marked as indexed
    are not read again, so the cost does not grow with the length of the run."""
    added = 0
    for s in step_numbers(catalog.run):
        if s >= step:
            break
        missing = _expected_types(catalog.run, s) - store.indexed_types(s)
        if missing:
            added += index_step(store, catalog, s, tuple(t for t in ("analysis", "summary", "update") if t in missing))
    return added


def rebuild(store: MemoryStore, catalog: RunCatalog) -> int:
    store.reset()
    return sum(index_step(store, catalog, s) for s in step_numbers(catalog.run))


def static_retrieval(run: RunDir, step: int, k: int, instance_id: str | None = None) -> list[StaticEntry]:
    """Summaries and rubric updates of the K most recent earlier steps that have a summary.
    Walks back from the newest step, so the cost is O(K), not O(steps)."""
    recent: list[tuple[int, SummaryRecord]] = []
    for s in reversed([s for s in step_numbers(run) if s < step]):
        if len(recent) >= k:
            break
        summary = load_summary(run, s, instance_id)
        if summary is not None:
            recent.append((s, summary))
    entries: list[StaticEntry] = []
    for s, summary in reversed(recent):
        e = summary_entry(summary)
        entries.append(StaticEntry(id=e.id, type="summary", step=s, text=e.text))
        update = load_update(run, s, instance_id)
        if update is not None:
            u = update_entry(update)
            entries.append(StaticEntry(id=u.id, type="update", step=s, text=u.text))
    return entries


def dynamic_retrieval(store: MemoryStore, catalog: RunCatalog, queries: list[str], n: int, step: int,
                      exclude: set[str], instance_id: str | None = None) -> list[MemoryHit]:
    """n hits per query from steps < step, without the static entries and without duplicates."""
    hits: list[MemoryHit] = []
    seen = {store.key(e) for e in exclude}
    keyed_exclude = {store.key(e) for e in exclude}
    for query, found in zip(queries, store.query(queries, n, step, instance_id or "", keyed_exclude), strict=True):
        taken = 0
        for key, entry_type, entry_step, distance, document in found:
            if key in seen:
                continue
            seen.add(key)
            own = store.own(key)
            text = catalog.text(own, entry_step) if own is not None else (document or "")
            hits.append(to_hit(own or key, entry_type, entry_step, distance, query, text))
            taken += 1
            if taken == n:
                break
    return hits
