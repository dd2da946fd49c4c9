"""The memory index on ChromaDB: one collection per record type, vectors and metadata only.

Embedded (default): a PersistentClient under RUN/memory. Two processes with a client open on one
path silently lose vectors, and even a client that only queries writes to the store when it opens
it (../shared/CHROMA.md; checked with chromadb 1.5.9: a query-only open rewrites chroma.sqlite3).
So:
  - a writer (summarize, update, evolve, loop, rebuild) holds the memory lock for as long as its
    client is open (waiting, with a message, while another writer has it), and takes the brief
    memory-io lock around each write;
  - a reader (`memory search`) never opens the live store: it copies it to a temporary directory
    under a shared hold of the io lock (so never mid-write) and queries the copy. Readers never wait
    for a writer's whole run, and work on a read-only run directory.

Shared (`memory.url`, a `chroma run` server): several jobs or a sweep share one memory; the server
orders writes, so no lock is taken. Ids are prefixed with a key of the run that wrote them, the
digest text is stored as the document (a hit from another job cannot be read from this run's files),
and a rebuild deletes only this run's entries. Embeddings are computed client-side in both modes.

Dynamic retrieval filters on `step < t`, so entries of the current or later steps are never returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import shutil
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

from amaris_cli import locks
from amaris_cli.config import MemorySettings
from amaris_cli.errors import AmarisError
from amaris_cli.eventloop import stopping
from amaris_cli.jsonio import read_json, write_json_atomic
from amaris_cli.llm.endpoint import public_url, redact, url_secrets
from amaris_cli.memory.digests import EntryType, MemoryEntry
from amaris_cli.memory.embeddings import Embedder
from amaris_cli.memory.privatecopy import PrivateDirectory
from amaris_cli.memory.runkey import run_keys
from amaris_cli.models import MemoryHit
from amaris_cli.rundir import RunDir

Mode = Literal["writer", "reader"]
F = TypeVar("F", bound=Callable[..., Any])


def _store_errors(fn: F) -> F:
    """ChromaDB's own errors (a full disk under SQLite, a damaged index) as one line naming the store."""

    @functools.wraps(fn)
    def wrapper(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except (AmarisError, OSError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a third-party storage engine: say where, not a traceback
            raise AmarisError(f"{self.run.memory_path}: the memory store failed ({type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]}); if the disk is full, free space and re-run; "
                              f"if the index is damaged, `amaris memory rebuild --run {self.run.path}`") from None

    return wrapper  # type: ignore[return-value]
MEMORY_LOCK = "memory"
IO_LOCK = "memory-io"

COLLECTIONS: dict[EntryType, str] = {"analysis": "analyses", "summary": "summaries", "update": "updates"}
PAGE = 1000
META_FILE = "amaris-memory.json"  # which embedder built the index
COPY_PREFIX = "amaris-memory-"  # a reader's private copy, in the temporary directory
# hnswlib's candidate list per query. ChromaDB's default (100) leaves the search approximate: on an index of
# 5,000 entries a tenth of the queries found other nearest entries when the same entries had been added in
# another order (a resumed run's), a quarter at 10,000. At 512 none did (tests/test_retrieval_quality.py); a
# query costs about 0.2 ms more, and an update makes a handful.
EF_SEARCH = 512
TIE_MARGIN = 8  # candidates fetched beyond those a query keeps (see query)


class MemoryStore:
    @classmethod
    def open(cls, run: RunDir, settings: MemorySettings, mode: Mode = "writer", rebuilding: bool = False,
             wait: float = 0.0, say: Callable[[str], None] | None = None, replaying: RunDir | None = None,
             offline: bool = False, stop: threading.Event | None = None, outage_budget: float = 0.0) -> MemoryStore:
        """The run's memory as its settings describe it (embedded, or a shared server). A writer waits up
        to `wait` seconds for another writer (0: fail at once, exit 3). `rebuilding` accepts an index built
        with another embedder, since it is about to be replaced. ChromaDB and the embedding model are only
        loaded when first needed: a command whose steps are all indexed already never loads them.
        `replaying`: a replay's source, whose record of an endpoint's vectors is read first (`offline`: only
        the records are; memory/embeddings.py). `outage_budget`: how long an embeddings endpoint that is down is
        waited for (llm.outage_budget)."""
        return cls(run, settings, mode=mode, rebuilding=rebuilding, wait=wait, say=say, replaying=replaying,
                   offline=offline, stop=stop, outage_budget=outage_budget)

    @_store_errors
    def __init__(self, run: RunDir, settings: MemorySettings, mode: Mode = "writer", rebuilding: bool = False,
                 wait: float = 0.0, say: Callable[[str], None] | None = None, embedder: Embedder | None = None,
                 replaying: RunDir | None = None, offline: bool = False, stop: threading.Event | None = None,
                 outage_budget: float = 0.0) -> None:
        """`embedder` replaces the one the settings name (tests measure retrieval with others)."""
        from amaris_cli.memory.embeddings import EmbeddingRecord, embedder_name

        self.run = run
        self._record = EmbeddingRecord(run.embeddings_path, writes=mode == "writer",
                                       source=replaying.embeddings_path if replaying is not None else None,
                                       offline=offline)
        self.settings = settings
        self.shared = settings.url is not None
        self.writer = mode == "writer"
        self._run_keys = run_keys(run, keep=self.writer) if self.shared else ()
        self.run_key = self._run_keys[0] if self.shared else ""
        self._lock: Any = None
        self.turn = asyncio.Lock()  # memory work runs in a thread, one at a time (service.in_thread)
        self._copy: PrivateDirectory | None = None
        self._client: Any = None
        self._collections: dict[EntryType, Any] = {}
        self._embedder: Embedder | None = embedder
        self._own_embedder = embedder is None  # made here (embedder): closed here
        self._say = say
        self._outage_budget = outage_budget
        self._names = {t: f"{settings.namespace}-{name}" if self.shared else name for t, name in COLLECTIONS.items()}
        path = run.memory_path
        if self.writer and not self.shared:
            self._lock = locks.exclusive(run.lock_path(MEMORY_LOCK), f"the memory of {run.path}", wait=wait, on_wait=say,
                                         stop=stop)
            self._lock.__enter__()
        try:
            if self.writer:
                path.mkdir(parents=True, exist_ok=True)
                if rebuilding:
                    (path / META_FILE).unlink(missing_ok=True)
            meta_path, name = path / META_FILE, embedder.name if embedder is not None else embedder_name(settings)
            if meta_path.exists():
                meta = read_json(meta_path)
                if meta.get("embedder") != name:
                    raise AmarisError(
                        f"{path}: the memory was built with embedder {meta.get('embedder')!r}, the config now asks "
                        f"for {name!r}; run `amaris memory rebuild --run {run.path}`"
                    )
            elif self.writer:
                write_json_atomic(meta_path, {"embedder": name})
            self._marks_path = path / self._marks_name()
            self._marks: dict[str, dict[str, str]] = {}
            # (an embedded memory that holds no index has indexed nothing: earlier versions kept a shared server's
            # marks in this file)
            if self._marks_path.exists() and (self.shared or (path / "chroma.sqlite3").exists()):
                marks = read_json(self._marks_path)
                if all(isinstance(v, dict) for v in marks.values()):  # older runs kept lists: re-check those steps
                    self._marks = marks
        except BaseException:
            self.close()
            raise

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from amaris_cli.memory.embeddings import make_embedder

            self._embedder = make_embedder(self.settings, record=self._record,
                                           outage_budget=self._outage_budget, say=self._say)
        return self._embedder

    def _store(self) -> dict[EntryType, Any]:
        """The collections, opening ChromaDB on first use (a reader opens a private copy of the store, taken
        under a shared hold of the io lock so that it is never taken mid-write)."""
        if self._client is not None:
            return self._collections
        from amaris_cli import preload

        preload.settle()  # ChromaDB's import in the preload thread ends first (preload.py)
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        settings, path, url = ChromaSettings(anonymized_telemetry=False), self.run.memory_path, self.settings.url
        if url is not None:
            parsed = urlparse(url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise AmarisError(f"memory url {public_url(url)!r}: expected http://HOST:PORT")
            try:
                self._client = chromadb.HttpClient(host=parsed.hostname, port=parsed.port or 8000,
                                                   ssl=parsed.scheme == "https", settings=settings)
            except Exception as exc:  # noqa: BLE001 - connection refused, wrong server
                raise AmarisError(f"memory url {public_url(url)}: cannot reach a Chroma server "
                                  f"({redact(str(exc), url_secrets(url))})") from None
        else:
            if not self.writer:
                self._copy = PrivateDirectory(COPY_PREFIX)
                with locks.shared(self.run.lock_path(IO_LOCK)):
                    if path.is_dir():
                        shutil.copytree(path, self._copy.path / "memory")
                    else:
                        (self._copy.path / "memory").mkdir()
                path = self._copy.path / "memory"
            try:
                self._client = chromadb.PersistentClient(path=str(path), settings=settings)
            except Exception:
                _forget_system(str(path))
                raise
        with self._writing() if self.writer else nullcontext():
            self._collections = self._open()
        return self._collections

    def close(self) -> None:
        """Release the client, then the memory lock (a writer) or the private copy (a reader)."""
        client = getattr(self, "_client", None)
        if client is not None and hasattr(client, "close"):
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing must not hide the error that brought us here
                pass
        self._client = None
        if self._own_embedder and (close_embedder := getattr(self._embedder, "close", None)) is not None:
            close_embedder()  # the files of an embedding cache or a run's record
        if self.writer and not self.shared and self._lock is not None:
            from amaris_cli.memory.scrub import scrub_hnsw

            # Also when this process never opened the client: a writer killed before it could scrub (SIGKILL,
            # SIGTERM) left its process memory in the index files, and a resumed command that finds every step
            # indexed never opens the client. The memory lock is held, so no other writer is mid-write.
            with contextlib.suppress(Exception), locks.brief(self.run.lock_path(IO_LOCK)):
                scrub_hnsw(self.run.memory_path)  # no process memory at rest in the index files (scrub.py)
        if self._copy is not None:
            copy, self._copy = self._copy, None
            copy.remove()
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.__exit__(None, None, None)

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _writing(self) -> Any:
        """The io lock around one write to an embedded store (readers copy between writes)."""
        if not self.writer:
            raise AmarisError("internal: a memory reader cannot write")
        return nullcontext() if self.shared else locks.brief(self.run.lock_path(IO_LOCK))

    def _marks_name(self) -> str:
        """The file of the marks of the store this process writes to: the embedded memory's, or one per shared server,
        namespace and run key. One file for all let steps indexed in one store read as indexed in another (a run
        that moved to a server at step 2 never put steps 0-1 there; a `cp -r` copy of a run on a server, with a key
        of its own, never indexed its history under it)."""
        if not self.shared:
            return "indexed-steps.json"
        parsed = urlparse(self.settings.url or "")
        store = f"{parsed.scheme}://{parsed.hostname}:{parsed.port or 8000}\n{self.settings.namespace}\n{self.run_key}"
        return f"indexed-steps.shared-{hashlib.sha256(store.encode()).hexdigest()[:16]}.json"

    # Which files of each step are indexed, by their SHA-256 (from provenance.json): lets a sync skip
    # steps without reading their files, and re-index a step whose files were recomputed. Written after
    # the entries are added, so a crash in between only means a harmless re-check.
    def mark(self, step: int, entry_type: str) -> str | None:
        return self._marks.get(str(step), {}).get(entry_type)

    def set_mark(self, step: int, entry_type: str, sha: str) -> None:
        marks = self._marks.setdefault(str(step), {})
        if marks.get(entry_type) != sha:
            marks[entry_type] = sha
            if self.writer:
                write_json_atomic(self._marks_path, self._marks)

    @_store_errors
    def delete_step(self, step: int, entry_type: EntryType) -> None:
        """Forget a step's entries of one type (its files were recomputed)."""
        where: dict[str, Any] = {"step": step}
        if self.shared:
            where = {"$and": [{"step": step}, {"run": {"$in": list(self._run_keys)}}]}
        collection = self._store()[entry_type]  # opened outside the io lock, which opening takes itself
        with self._writing():
            collection.delete(where=where)
        self._marks.get(str(step), {}).pop(entry_type, None)

    def _open(self) -> dict[EntryType, Any]:
        """The collections (created when missing: a write, so callers that write hold the io lock); one an
        earlier version created searches as wide as a new one from now on (a reader's copy, in its copy).
        A running Chroma server keeps searching an index it has loaded at the width it loaded it with (checked
        with chromadb 1.5.9): a shared memory is widened when the server restarts, which the writer says."""
        widened = []
        with _without_legacy_config_warning():
            collections = {t: self._client.get_or_create_collection(
                name, embedding_function=None, configuration={"hnsw": {"space": "cosine", "ef_search": EF_SEARCH}})
                for t, name in self._names.items()}
            for collection in collections.values():
                if (collection.configuration.get("hnsw") or {}).get("ef_search", 0) < EF_SEARCH:
                    collection.modify(configuration={"hnsw": {"ef_search": EF_SEARCH}})
                    widened.append(collection.name)
        if widened and self.shared and self._say is not None:
            self._say(f"memory url {public_url(self.settings.url)}: {', '.join(widened)} set to search wider (ef_search "
                      f"{EF_SEARCH}, as this version creates them); the server applies it to a collection it has "
                      "already loaded only once it restarts: restart it for exact nearest entries")
        return collections

    def key(self, entry_id: str) -> str:
        return f"{self.run_key}|{entry_id}" if self.shared else entry_id

    def keys(self, entry_id: str) -> list[str]:
        """Every key this run's entry may be stored under: `key`, and the one of an earlier version (run_keys)."""
        return [f"{k}|{entry_id}" for k in self._run_keys] if self.shared else [entry_id]

    def own(self, key: str) -> str | None:
        """The entry id of a key this run wrote, or None for another job's entry."""
        if not self.shared:
            return key
        return next((key[len(k) + 1:] for k in self._run_keys if key.startswith(f"{k}|")), None)

    @_store_errors
    def existing(self, ids: Sequence[str], entry_type: EntryType) -> set[str]:
        found: set[str] = set()
        col = self._store()[entry_type]
        keys = [k for i in ids for k in self.keys(i)]
        for start in range(0, len(keys), PAGE):
            found.update(col.get(ids=keys[start : start + PAGE], include=[])["ids"])
        return {self.own(k) or k for k in found}

    @_store_errors
    def add(self, entries: Iterable[MemoryEntry]) -> int:
        """Index entries not yet indexed; returns how many were added."""
        by_type: dict[EntryType, list[MemoryEntry]] = {}
        for e in entries:
            by_type.setdefault(e.type, []).append(e)
        added = 0
        for entry_type, group in by_type.items():
            present = self.existing([e.id for e in group], entry_type)
            todo = [e for e in group if e.id not in present]
            for start in range(0, len(todo), 256):
                if stopping():  # Ctrl-C, SIGTERM: a big step's embedding ends at a batch, its marks unset
                    raise KeyboardInterrupt
                batch = todo[start : start + 256]
                vectors = self.embedder.embed([e.embedded for e in batch])  # outside the io lock: the slow part
                collection = self._store()[entry_type]
                with self._writing():
                    collection.add(
                        ids=[self.key(e.id) for e in batch],
                        embeddings=vectors,  # type: ignore[arg-type]
                        metadatas=[{"step": e.step, "type": e.type, "instance_id": e.instance_id or "",
                                    "run": self.run_key} for e in batch],
                        documents=[e.text for e in batch] if self.shared else None,
                    )
                added += len(batch)
        return added

    @_store_errors
    def counts(self) -> dict[str, int]:
        """The run's entries by type: in a shared memory, not the other runs' entries beside them."""
        if not self.shared:
            return {t: col.count() for t, col in self._store().items()}
        mine = {"run": {"$in": list(self._run_keys)}}
        return {t: self._count(col, mine) for t, col in self._store().items()}

    @staticmethod
    def _count(col: Any, where: dict[str, Any]) -> int:
        """The entries matching `where`, read a page of ids at a time (a server caps what one answer holds)."""
        total = 0
        while len(page := col.get(where=where, include=[], limit=PAGE, offset=total)["ids"]) > 0:
            total += len(page)
            if len(page) < PAGE:
                break
        return total

    def where(self) -> str:
        """Where the index is, for a message: the run's directory, or the shared server (no credentials)."""
        if self.shared:
            return f"{public_url(self.settings.url or '')} (namespace {self.settings.namespace!r})"
        return str(self.run.memory_path)

    @_store_errors
    def query(self, texts: list[str], n: int, before_step: int, instance_id: str = "",
              exclude: set[str] | None = None) -> list[list[tuple[str, EntryType, int, float, str | None]]]:
        """For each text, the nearest entries of steps < before_step (of one instance, "" = global),
        enough that n remain after `exclude`.

        Fast path: a plain nearest-neighbour query, filtered afterwards. A step's records are indexed
        after its update, so during the update of step t the index normally holds only earlier steps
        and the fast path is exact. When it comes back short (newer or other-instance entries in the
        way), the query is redone with a metadata filter, which is exact but slow on large indexes.

        Entries as near as the last one kept are all fetched and chosen by key: which of them the index
        returns depends on the order they were added in, and a run resumed after a crash adds them in
        another order than an uninterrupted one (it retrieved, so prompted the updater with, others)."""
        if not texts:
            return []
        vectors = self.embedder.embed(texts)
        want = n + len(exclude or ())
        per_text: list[list[tuple[str, EntryType, int, float, str | None]]] = [[] for _ in texts]
        include = ["metadatas", "distances", "documents"] if self.shared else ["metadatas", "distances"]
        where: dict[str, Any] = {"$and": [{"step": {"$lt": before_step}}, {"instance_id": instance_id}]}
        for entry_type, col in self._store().items():
            count = col.count()
            if count == 0:
                continue
            k = min(want, count)
            fetch = min(want + TIE_MARGIN, count)
            found = col.query(query_embeddings=vectors, n_results=fetch, include=include)  # type: ignore[arg-type]
            for i in range(len(texts)):
                again = functools.partial(_query_one, col, vectors[i], where, include)
                for key, meta, dist, doc in _nearest(_rows(found, i), again, k, fetch, count, before_step, instance_id):
                    per_text[i].append((key, entry_type, int(meta["step"]), float(dist), doc))
        results = []
        for hits in per_text:
            hits.sort(key=lambda h: _ranked(h[3], h[0]))
            results.append([h for h in hits if not exclude or h[0] not in exclude])
        return results

    @_store_errors
    def reset(self) -> None:
        """Forget this run's entries (on a shared server, only this run's)."""
        self._marks = {}
        self._marks_path.unlink(missing_ok=True)
        collections = self._store()
        with self._writing():
            if self.shared:
                for col in collections.values():
                    col.delete(where={"run": {"$in": list(self._run_keys)}})
                return
            for name in self._names.values():
                try:
                    self._client.delete_collection(name)
                except Exception:  # noqa: BLE001 - absent collection
                    pass
            self._collections = self._open()


def _forget_system(identifier: str) -> None:
    """chromadb keeps one System per path in the process; one whose start failed (e.g. on a full disk) stays
    cached half-built, and every later client of that path in this process would get it. Drop it."""
    from chromadb.api.shared_system_client import SharedSystemClient

    system = SharedSystemClient._identifier_to_system.pop(identifier, None)
    SharedSystemClient._identifier_to_refcount.pop(identifier, None)
    if system is not None:
        try:
            system.stop()
        except Exception:  # noqa: BLE001 - it never started
            pass


_Row = tuple[str, dict[str, Any], float, str | None]  # key, metadata, distance, document


_WARNINGS_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_legacy_config_warning() -> Iterator[None]:
    """ChromaDB warns that a collection created without an embedding function has a "legacy embedding function
    config" each time it reads the configuration: amaris embeds itself, by design. catch_warnings swaps the
    process's filter list and puts it back: two stores opening at once (a server's threads) would each put
    back the list the other swapped in, so they take turns."""
    with _WARNINGS_LOCK, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "legacy embedding function config", DeprecationWarning)
        yield


def _ranked(distance: float, key: str) -> tuple[float, str]:
    """Nearest first; equal distances (to the 6 decimals retrieval.json records) by key."""
    return round(distance, 6), key


def _query_one(col: Any, vector: list[float], where: dict[str, Any], include: list[str], size: int,
               filtered: bool) -> list[_Row]:
    """The `size` nearest rows of one query vector (only those `where` admits, when filtered)."""
    return _rows(col.query(query_embeddings=[vector], n_results=size, where=where if filtered else None,
                           include=include), 0)


def _nearest(rows: list[_Row], again: Callable[[int, bool], list[_Row]], k: int, fetch: int, count: int,
             before_step: int, instance_id: str) -> list[_Row]:
    """The k nearest usable rows (of steps < before_step, of the instance), from the `fetch` nearest of the index
    (`rows`), fetching more through `again(size, filtered)` while those fall short: filtered when the unusable
    ones leave fewer than k, twice as many while the farthest fetched is as near as the k-th (more may tie with
    it). Bounded: one filtered query at most, and log2(count) doublings, the index holding `count` entries."""
    filtered = False
    while True:
        usable = rows if filtered else [r for r in rows if int(r[1]["step"]) < before_step
                                        and r[1]["instance_id"] == instance_id]
        if not filtered and len(usable) < len(rows) and len(usable) < k:
            filtered = True
            rows = again(fetch, True)
            continue
        usable.sort(key=lambda r: _ranked(r[2], r[0]))
        exhausted = len(rows) < fetch or fetch >= count
        if exhausted or len(usable) < k or max(round(r[2], 6) for r in rows) > round(usable[k - 1][2], 6):
            return usable[:k]
        fetch = min(2 * fetch, count)
        rows = again(fetch, filtered)


def _rows(found: Any, i: int) -> list[_Row]:
    docs = found.get("documents") or None
    return [(found["ids"][i][j], found["metadatas"][i][j], found["distances"][i][j], docs[i][j] if docs else None)
            for j in range(len(found["ids"][i]))]


def to_hit(id_: str, entry_type: EntryType, step: int, distance: float, query: str, text: str) -> MemoryHit:
    return MemoryHit(id=id_, type=entry_type, step=step, distance=round(distance, 6), query=query, text=text)
