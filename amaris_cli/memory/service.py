"""Memory operations over a run: indexing a step's records, static and dynamic retrieval, rebuild."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from amaris_cli import artifacts
from amaris_cli.memory.digests import (
    EntryType,
    MemoryEntry,
    analysis_entries,
    analysis_entry,
    summary_entry,
    update_entry,
)
from amaris_cli.memory.store import MemoryStore, to_hit
from amaris_cli.models import MemoryHit, StaticEntry, SummaryRecord
from amaris_cli.rundir import RunDir

T = TypeVar("T")
TYPES: tuple[EntryType, ...] = ("analysis", "summary", "update")
FILES: dict[EntryType, str] = {"analysis": artifacts.ANALYSES, "summary": artifacts.SUMMARY, "update": artifacts.UPDATE}


class RunCatalog:
    """Entries of a run, derived from its files (the source of truth)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        self._texts: dict[str, str] = {}

    def step_entries(self, step: int, types: tuple[str, ...] = TYPES) -> list[MemoryEntry]:
        entries: list[MemoryEntry] = []
        if "analysis" in types:
            analyses = artifacts.load_analyses(self.run, step)
            for a in analyses:  # a hit's text, also of an analysis an older index holds (it had one entry each)
                if (own := analysis_entry(a, self.run.instance_dir)) is not None:
                    self._texts[own.id] = own.text
            entries += analysis_entries(analyses, self.run.instance_dir)
        for summary in artifacts.load_summaries(self.run, step):
            if "summary" in types:
                entries.append(summary_entry(summary, self.run.instance_dir))
            if "update" in types and (u := artifacts.load_update(self.run, step, summary.instance_id)) is not None:
                entries.append(update_entry(u, self.run.instance_dir))
        for e in entries:
            self._texts[e.id] = e.text
        return entries

    def text(self, entry_id: str, step: int) -> str:
        if entry_id not in self._texts:
            self.step_entries(step)
        return self._texts.get(entry_id, "(entry no longer in the run's files)")


async def in_thread(store: MemoryStore, work: Callable[[], T]) -> T:
    """Memory work (embedding texts, the index's reads and writes, the step files they read) in a thread, one at a
    time per store. On the event loop's thread it held every other task of the process: the local model embedding
    a big step (minutes at 10,000 rollouts) kept Ctrl-C waiting to its end, and a wait for an embeddings endpoint
    that is down (up to llm.outage_budget) left the other instances' judge answers unread until it ended.
    Cancelled, the task ends once the work has (it stops at its next batch): the store is closed next."""
    from amaris_cli.eventloop import blocking

    async with store.turn:
        return await blocking(lambda _stop: work(), finish=True)


def files_shas(run: RunDir, step: int) -> dict[EntryType, str | None]:
    """The content of a step's files of each type (per-instance files included; None: there are none)."""
    files = artifacts.read_provenance(run, step).files
    shas: dict[EntryType, str | None] = {}
    for entry_type, name in FILES.items():
        found = sorted((rel, d.sha256) for rel, d in files.items() if rel.rsplit("/", 1)[-1] == name)
        shas[entry_type] = artifacts.digest(found) if found else None
    return shas


def index_step(store: MemoryStore, catalog: RunCatalog, step: int, types: tuple[str, ...] = TYPES) -> int:
    """Index a step's records of the given types, unless the index already holds exactly these files.
    A type whose files changed since it was indexed (the step was recomputed) is replaced."""
    added = 0
    shas = files_shas(catalog.run, step)
    for entry_type in TYPES:
        if entry_type not in types:
            continue
        sha = shas[entry_type]
        known = store.mark(step, entry_type)
        if sha is None or known == sha:
            continue
        if known is not None:
            store.delete_step(step, entry_type)
        # One add per type, in file order, so a rebuild embeds exactly the same batches.
        added += store.add(catalog.step_entries(step, (entry_type,)))
        store.set_mark(step, entry_type, sha)
    return added


def sync_before(store: MemoryStore, catalog: RunCatalog, step: int) -> int:
    """Index whatever earlier steps hold that the index lacks, or holds in an older version.
    Reads only each step's provenance.json, so the cost stays small as the run grows."""
    return sum(index_step(store, catalog, s) for s in artifacts.step_numbers(catalog.run) if s < step)


def rebuild(store: MemoryStore, catalog: RunCatalog) -> int:
    store.reset()
    return sum(index_step(store, catalog, s) for s in artifacts.step_numbers(catalog.run))


def static_retrieval(run: RunDir, step: int, k: int, instance_id: str | None = None) -> list[StaticEntry]:
    """Summaries and rubric updates of the K most recent earlier steps that have a summary.
    Walks back from the newest step, so the cost is O(K), not O(steps)."""
    recent: list[tuple[int, SummaryRecord]] = []
    for s in reversed([s for s in artifacts.step_numbers(run) if s < step]):
        if len(recent) >= k:
            break
        summary = artifacts.load_summary(run, s, instance_id)
        if summary is not None:
            recent.append((s, summary))
    entries: list[StaticEntry] = []
    for s, summary in reversed(recent):
        e = summary_entry(summary, run.instance_dir)
        entries.append(StaticEntry(id=e.id, type="summary", step=s, text=e.text))
        update = artifacts.load_update(run, s, instance_id)
        if update is not None:
            u = update_entry(update, run.instance_dir)
            entries.append(StaticEntry(id=u.id, type="update", step=s, text=u.text))
    return entries


def dynamic_retrieval(store: MemoryStore, catalog: RunCatalog, queries: list[str], n: int, step: int,
                      static: list[StaticEntry], instance_id: str | None = None) -> list[MemoryHit]:
    """n hits per query from steps < step, without the static entries and without duplicates. In a shared memory,
    another job's entry that says what one of this run's entries, a static entry or a hit already taken says (a `cp
    -r` copy of the run holds the original's history under its own key; a sweep's arms analyze the same rollouts
    alike) is the same hit again: left out."""
    hits: list[MemoryHit] = []
    keyed_exclude = {k for e in static for k in store.keys(e.id)}
    seen = set(keyed_exclude)
    said = {e.text for e in static}
    # Each query is asked for enough that n remain after the hits of the queries before it (n each): asked for n,
    # a query near an earlier one came back with fewer, or with farther entries of another type in their place.
    wanted = n * len(queries)
    for query, found in zip(queries, store.query(queries, wanted, step, instance_id or "", keyed_exclude), strict=True):
        own_texts = ({catalog.text(own, s) for key, _, s, _, _ in found if (own := store.own(key)) is not None}
                     if store.shared else set())  # (in the run's embedded memory every entry is its own)
        taken = 0
        for key, entry_type, entry_step, distance, document in found:
            if key in seen:
                continue
            seen.add(key)
            own = store.own(key)
            text = catalog.text(own, entry_step) if own is not None else (document or "")
            if own is None and (text in said or text in own_texts):
                continue
            said.add(text)
            hits.append(to_hit(own or key, entry_type, entry_step, distance, query, text))
            taken += 1
            if taken == n:
                break
    return hits


def rebuild_run(run_path: Path, flags: dict[str, Any]) -> tuple[int, dict[str, int], str]:
    """Re-create the index from the run's files: (entries added, the run's entries by type, where the index is).
    A second writer of the memory is an error (exit 3)."""
    from amaris_cli.config import load_settings

    run = RunDir(run_path)
    settings = load_settings(base=run.load_manifest().config, flags=flags)
    with MemoryStore.open(run, settings.memory, "writer", rebuilding=True) as store:
        added = rebuild(store, RunCatalog(run))
        return added, store.counts(), store.where()


def search_run(run_path: Path, text: str, n: int, before_step: int | None,
               flags: dict[str, Any]) -> tuple[list[MemoryHit], int]:
    """What dynamic retrieval would return for `text`, read from a copy of the memory (a reader takes
    no lock and writes nothing: it works while an evolution writes, and on a read-only run)."""
    from amaris_cli.config import load_settings

    run = RunDir(run_path)
    settings = load_settings(base=run.load_manifest().config, flags=flags)
    limit = before_step if before_step is not None else (max(artifacts.step_numbers(run), default=0) + 1)
    with MemoryStore.open(run, settings.memory, "reader") as store:
        return dynamic_retrieval(store, RunCatalog(run), [text], n, limit, []), limit
