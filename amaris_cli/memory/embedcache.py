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
import shutil
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from amaris_cli.errors import ConfigError
from amaris_cli.memory.privatecopy import PrivateDirectory

if TYPE_CHECKING:
    from amaris_cli.memory.embeddings import Embedder


def _set_up(db: sqlite3.Connection, wal: bool) -> None:
    """WAL mode and the table, by the first of several processes that open a new cache at once. SQLite answers
    "database is locked" at once, without waiting out the busy timeout, to a connection that would deadlock
    another (two processes switching a new file to WAL together): such a statement is tried again, for as long
    as the busy timeout would have waited (a test saw one of three writers fail this way)."""
    deadline = time.monotonic() + 60
    pause = 0.01
    while True:
        try:
            if wal:
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def _pack(vector: list[float]) -> bytes:
    return struct.pack(f"<{len(vector)}d", *vector)


def _unpack(blob: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(blob) // 8}d", blob))


class EmbeddingCache:
    """The vectors one embedder gave, by text, in `directory`.

    The same file format keeps a run's record of its endpoint's vectors (RUN/embeddings, embeddings.py):
    `label` and `advice` name it in errors; it is written by one memory writer at a time, so it keeps
    SQLite's rollback journal (`wal` False) and a replay reads a source's record `read_only`, also on a
    read-only file system (a WAL file cannot be opened there once its writer closed it)."""

    def __init__(self, directory: Path, embedder_name: str, *, label: str = "AMARIS_EMBEDDING_CACHE",
                 advice: str = "it is only a cache: delete the file, or unset AMARIS_EMBEDDING_CACHE",
                 wal: bool = True, read_only: bool = False) -> None:
        self.label, self.advice, self.wal, self.read_only = label, advice, wal, read_only
        if not read_only:
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"{label} {directory}: cannot create the directory ({exc.strerror})") from None
        self.path = directory / (re.sub(r"[^A-Za-z0-9._-]+", "_", embedder_name) + ".sqlite")
        self._local = threading.local()  # one connection per thread: sqlite3 connections are not shared
        self._opened: list[sqlite3.Connection] = []  # every thread's, closed together (close)
        self._opened_lock = threading.Lock()
        self._copy: PrivateDirectory | None = None  # a read-only view's private copy, when a killed writer left a hot journal

    def _failed(self, exc: sqlite3.Error) -> ConfigError:
        return ConfigError(f"{self.label} {self.path}: {exc} ({self.advice})")

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                # Used by the thread that opened it only; closed by whichever thread closes the cache.
                if self.read_only:
                    db = self._view()
                else:
                    db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
                with self._opened_lock:
                    self._opened.append(db)
                if not self.read_only:  # a view cannot create the table: until its writer has, it finds nothing (get)
                    _set_up(db, self.wal)
            except sqlite3.Error as exc:
                raise self._failed(exc) from None
            self._local.db = db
        return db

    def _view(self) -> sqlite3.Connection:
        """A read-only connection to the file. A writer killed inside a write leaves a hot journal beside it, which
        only a writer may roll back: then a private copy of both, which SQLite rolls back as it opens it (as the
        memory's readers read a copy of its index), the files themselves left as they are."""
        db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # the first read looks for a hot journal
            return db
        except sqlite3.Error as exc:
            db.close()
            if exc.sqlite_errorcode != sqlite3.SQLITE_READONLY_ROLLBACK:
                raise
        with self._opened_lock:
            if self._copy is None:
                copy = PrivateDirectory("amaris-record-")
                try:
                    for name in (self.path.name, f"{self.path.name}-journal"):
                        shutil.copyfile(self.path.with_name(name), copy.path / name)
                except BaseException:
                    copy.remove()
                    raise
                self._copy = copy
        return sqlite3.connect(self._copy.path / self.path.name, timeout=60, isolation_level=None, check_same_thread=False)

    def get(self, texts: list[str]) -> dict[int, list[float]]:
        """The cached vectors of `texts`, by position."""
        if self.read_only and not self.path.exists():
            return {}
        keys = [_key(t) for t in texts]
        found: dict[bytes, list[float]] = {}
        try:
            for start in range(0, len(keys), 500):  # SQLite's limit on parameters
                part = keys[start : start + 500]
                rows = self._db().execute(f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})",
                                          part)
                found.update((key, _unpack(blob)) for key, blob in rows)
        except sqlite3.Error as exc:
            if self.read_only and str(exc).startswith("no such table"):  # its writer created the file, not the table yet
                return {}
            raise self._failed(exc) from None
        return {i: found[k] for i, k in enumerate(keys) if k in found}

    def close(self) -> None:
        """Close every thread's connection: a process that goes on (a server, a Python caller, the tests) keeps
        no file of a run open, and a read-only view of it can be unmounted."""
        with self._opened_lock:
            opened, self._opened = self._opened, []
        for db in opened:
            db.close()
        self._local = threading.local()
        if self._copy is not None:
            copy, self._copy = self._copy, None
            copy.remove()

    def put(self, texts: list[str], vectors: list[list[float]]) -> None:
        if self.read_only:  # a replay's source: only read
            return
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
        self._inner: Embedder | None = None

    def close(self) -> None:
        """Close the cache's files, and those of the embedder behind it (another cache, a run's record)."""
        self._cache.close()
        if (close := getattr(self._inner, "close", None)) is not None:
            close()

    def embed(self, texts: list[str]) -> list[list[float]]:
        cached = self._cache.get(texts)
        missing = list(dict.fromkeys(t for i, t in enumerate(texts) if i not in cached))  # each text once
        fresh: dict[str, list[float]] = {}
        if missing:
            self._inner = self._model()
            fresh = dict(zip(missing, self._inner.embed(missing), strict=True))
            self._cache.put(missing, [fresh[t] for t in missing])
        return [cached[i] if i in cached else fresh[t] for i, t in enumerate(texts)]
