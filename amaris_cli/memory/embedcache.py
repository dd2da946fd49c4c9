"""An on-disk cache of embeddings, shared by runs: the directory AMARIS_EMBEDDING_CACHE names.

Embedding is the memory's cost (about 17 ms of CPU per text with the local model on the 2-core machine),
and the same texts are embedded again and again: an ablation sweep replays one logged run into several
memories, `memory rebuild` embeds a run's entries once more, and runs over the same rollouts write many of
the same digests. A vector depends on its text alone (the local model's vector of a text is the same in any
batch, to the bit: tests/test_embedding_cache.py), so a cached vector is the vector the model would give
and a run reads the same vectors with or without the cache, warm or cold.

One SQLite file per embedder and model version (WAL: several processes read and write it at once), keyed by
the SHA-256 of the text: the cache holds no text. Vectors are kept as float64, as the embedders return them.
A cache that cannot be read or written is an error naming its file: it is only a cache, so deleting the file
is always safe.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from amaris_cli.errors import ConfigError

if TYPE_CHECKING:
    from amaris_cli.memory.embeddings import Embedder


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _pack(vector: list[float]) -> bytes:
    return struct.pack(f"<{len(vector)}d", *vector)


def _unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 8}d", blob))


class EmbeddingCache:
    """The vectors one embedder gave, by text, in `directory`."""

    def __init__(self, directory: Path, embedder_name: str) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"AMARIS_EMBEDDING_CACHE {directory}: cannot create the directory ({exc.strerror})") from None
        self.path = directory / (re.sub(r"[^A-Za-z0-9._-]+", "_", embedder_name) + ".sqlite")
        self._local = threading.local()  # one connection per thread: sqlite3 connections are not shared

    def _failed(self, exc: sqlite3.Error) -> ConfigError:
        return ConfigError(f"AMARIS_EMBEDDING_CACHE {self.path}: {exc} (it is only a cache: delete the file, or unset "
                           "AMARIS_EMBEDDING_CACHE)")

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID")
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            self._local.db = db
        return db

    def get(self, texts: list[str]) -> dict[int, list[float]]:
        """The cached vectors of `texts`, by position."""
        keys = [_key(t) for t in texts]
        found: dict[bytes, list[float]] = {}
        try:
            for start in range(0, len(keys), 500):  # SQLite's limit on parameters
                part = keys[start : start + 500]
                rows = self._db().execute(f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})",
                                          part)
                found.update((key, _unpack(blob)) for key, blob in rows)
        except sqlite3.Error as exc:
            raise self._failed(exc) from None
        return {i: found[k] for i, k in enumerate(keys) if k in found}

    def put(self, texts: list[str], vectors: list[list[float]]) -> None:
        rows = [(_key(t), _pack(v)) for t, v in zip(texts, vectors, strict=True)]
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR IGNORE INTO vectors (key, vector) VALUES (?, ?)", rows)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._failed(exc) from None


class CachedEmbedder:
    """An embedder that asks its model only for the texts the cache does not hold. The model is made on the
    first text the cache does not hold: a process whose texts are all cached never loads it."""

    def __init__(self, name: str, model: Callable[[], Embedder], cache: EmbeddingCache) -> None:
        self.name = name
        self._model = model  # the process's one model (embeddings.py), made on its first call
        self._cache = cache

    def embed(self, texts: list[str]) -> list[list[float]]:
        cached = self._cache.get(texts)
        missing = list(dict.fromkeys(t for i, t in enumerate(texts) if i not in cached))  # each text once
        fresh: dict[str, list[float]] = {}
        if missing:
            fresh = dict(zip(missing, self._model().embed(missing), strict=True))
            self._cache.put(missing, [fresh[t] for t in missing])
        return [cached[i] if i in cached else fresh[t] for i, t in enumerate(texts)]
