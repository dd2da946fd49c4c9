"""The memory index on ChromaDB: one collection per record type, vectors and metadata only.

One writer per store: the run lock guarantees it for the embedded PersistentClient (two
processes writing one path silently lose vectors). Dynamic retrieval filters on `step < t`, so
entries of the current or later steps are never returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from amaris_cli.errors import AmarisError
from amaris_cli.jsonio import read_json, write_json_atomic
from amaris_cli.memory.digests import EntryType, MemoryEntry
from amaris_cli.memory.embeddings import Embedder
from amaris_cli.models import MemoryHit
from amaris_cli.rundir import RunDir

COLLECTIONS: dict[EntryType, str] = {"analysis": "analyses", "summary": "summaries", "update": "updates"}
PAGE = 1000


class MemoryStore:
    def __init__(self, run: RunDir, embedder: Embedder) -> None:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        self.run = run
        self.embedder = embedder
        path = run.memory_path
        path.mkdir(parents=True, exist_ok=True)
        meta_path = path / "amaris-memory.json"
        if meta_path.exists():
            meta = read_json(meta_path)
            if meta.get("embedder") != embedder.name:
                raise AmarisError(
                    f"{path}: the memory was built with embedder {meta.get('embedder')!r}, the config now asks for "
                    f"{embedder.name!r}; run `amaris memory rebuild --run {run.path}`"
                )
        else:
            write_json_atomic(meta_path, {"embedder": embedder.name})
        self._client = chromadb.PersistentClient(path=str(path), settings=ChromaSettings(anonymized_telemetry=False))
        self._collections = {
            t: self._client.get_or_create_collection(name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}})
            for t, name in COLLECTIONS.items()
        }

    def existing(self, ids: Sequence[str], entry_type: EntryType) -> set[str]:
        found: set[str] = set()
        col = self._collections[entry_type]
        for start in range(0, len(ids), PAGE):
            found.update(col.get(ids=list(ids[start : start + PAGE]), include=[])["ids"])
        return found

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
                batch = todo[start : start + 256]
                vectors = self.embedder.embed([e.text for e in batch])
                self._collections[entry_type].add(
                    ids=[e.id for e in batch],
                    embeddings=vectors,  # type: ignore[arg-type]
                    metadatas=[{"step": e.step, "type": e.type, "instance_id": e.instance_id or ""} for e in batch],
                )
                added += len(batch)
        return added

    def counts(self) -> dict[str, int]:
        return {t: col.count() for t, col in self._collections.items()}

    def query(self, texts: list[str], n: int, before_step: int, instance_id: str = "",
              exclude: set[str] | None = None) -> list[list[tuple[str, EntryType, int, float]]]:
        """For each text, the nearest entries of steps < before_step (of one instance, "" = global),
        enough that n remain after `exclude`.

        Fast path: a plain nearest-neighbour query, filtered afterwards. A step's records are indexed
        after its update, so during the update of step t the index normally holds only earlier steps
        and the fast path is exact. When it comes back short (newer or other-instance entries in the
        way), the query is redone with a metadata filter, which is exact but slow on large indexes."""
        if not texts:
            return []
        vectors = self.embedder.embed(texts)
        want = n + len(exclude or ())
        per_text: list[list[tuple[str, EntryType, int, float]]] = [[] for _ in texts]
        where: dict[str, Any] = {"$and": [{"step": {"$lt": before_step}}, {"instance_id": instance_id}]}
        for entry_type, col in self._collections.items():
            count = col.count()
            if count == 0:
                continue
            k = min(want, count)
            found = col.query(query_embeddings=vectors, n_results=k, include=["metadatas", "distances"])  # type: ignore[arg-type]
            for i in range(len(texts)):
                rows = list(zip(found["ids"][i], found["metadatas"][i], found["distances"][i], strict=True))  # type: ignore[index]
                usable = [r for r in rows if int(r[1]["step"]) < before_step and r[1]["instance_id"] == instance_id]  # type: ignore[arg-type]
                if len(usable) < len(rows) and len(usable) < k:
                    exact = col.query(query_embeddings=[vectors[i]], n_results=k, where=where,  # type: ignore[arg-type]
                                      include=["metadatas", "distances"])
                    usable = list(zip(exact["ids"][0], exact["metadatas"][0], exact["distances"][0], strict=True))  # type: ignore[index]
                for id_, meta, dist in usable:
                    per_text[i].append((id_, entry_type, int(meta["step"]), float(dist)))  # type: ignore[arg-type]
        results = []
        for hits in per_text:
            hits.sort(key=lambda h: (round(h[3], 6), h[0]))
            results.append([h for h in hits if not exclude or h[0] not in exclude])
        return results

    def reset(self) -> None:
        for name in COLLECTIONS.values():
            try:
                self._client.delete_collection(name)
            except Exception:  # noqa: BLE001 - absent collection
                pass
        self._collections = {
            t: self._client.get_or_create_collection(name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}})
            for t, name in COLLECTIONS.items()
        }


def to_hit(id_: str, entry_type: EntryType, step: int, distance: float, query: str, text: str) -> MemoryHit:
    return MemoryHit(id=id_, type=entry_type, step=step, distance=round(distance, 6), query=query, text=text)
