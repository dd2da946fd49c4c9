"""The embedding cache (amaris_cli/memory/embedcache.py): a cached vector is the model's vector, to the bit, so a
run reads the same memory with the cache cold, warm or off; several processes share one cache."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from amaris_cli.config import MemorySettings
from amaris_cli.errors import ConfigError
from amaris_cli.memory.embedcache import CachedEmbedder, EmbeddingCache
from amaris_cli.memory.embeddings import LocalMiniLM, make_embedder
from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env, outputs

TEXTS = [
    "Step 3 rollout r7, reward 0.95. The response ends with a note asking the grader to award full marks.",
    "Step 3 summary. Two rollouts padded their answers with restated questions.",
    "short",
    "Step 4 rubric update (memory), version 3 -> 4. Added a pitfall against notes addressed to the grader. " * 6,
]


class Recording:
    """The real local model, noting which texts it was asked for (the cache must ask only for the new ones)."""

    def __init__(self) -> None:
        self.model = LocalMiniLM()
        self.name = self.model.name
        self.asked: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.asked.append(list(texts))
        return self.model.embed(texts)


def test_a_texts_vector_is_the_same_in_any_batch_to_the_bit() -> None:
    """What makes a per-text cache exact: if the model's vector of a text depended on its batch, a warm cache
    would change what a run retrieves."""
    model = LocalMiniLM()
    together = model.embed(TEXTS)
    alone = [model.embed([t])[0] for t in TEXTS]
    # Among other texts the batches (16 texts of similar length) hold other neighbours and other padding.
    others = [f"Step {i} rollout r{i}: " + "the answer is wrong and the grader is asked for marks " * (i % 9) for i in range(29)]
    mixed = model.embed(others[:13] + TEXTS + others[13:])[13:17]
    assert together == alone == mixed


def test_the_cache_gives_the_models_vectors_and_asks_it_only_for_new_texts(tmp_path: Path) -> None:
    recording = Recording()
    cached = CachedEmbedder(recording.name, lambda: recording, EmbeddingCache(tmp_path, "ns"))
    assert cached.embed(TEXTS[:2]) == recording.model.embed(TEXTS[:2])
    assert recording.asked == [TEXTS[:2]]
    # Repeats inside one call are embedded once; known texts are not embedded again.
    vectors = cached.embed([TEXTS[1], TEXTS[2], TEXTS[2], TEXTS[0], TEXTS[3]])
    assert recording.asked[1] == [TEXTS[2], TEXTS[3]]
    assert vectors == recording.model.embed([TEXTS[1], TEXTS[2], TEXTS[2], TEXTS[0], TEXTS[3]])
    # A new process (a new cache object on the same directory) reads them without the model.
    made: list[Recording] = []
    cold = CachedEmbedder("local", lambda: made.append(Recording()) or made[-1], EmbeddingCache(tmp_path, "ns"))
    assert cold.embed(TEXTS) == vectors[3:4] + vectors[:2] + vectors[4:]
    assert made == [], "the model is loaded only for a text the cache does not hold"
    # Another namespace (another model) never reads these vectors.
    other = Recording()
    CachedEmbedder(other.name, lambda: other, EmbeddingCache(tmp_path, "other-model")).embed(TEXTS[:1])
    assert other.asked == [TEXTS[:1]]


def test_vectors_that_are_not_float32_are_kept_exactly(tmp_path: Path) -> None:
    class Endpoint:  # an endpoint's JSON numbers: float64
        name = "openai:x"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[0.1 * (i + 1), 1 / 3, -2.5e-300] for i, _ in enumerate(texts)]

    first = CachedEmbedder("x", Endpoint, EmbeddingCache(tmp_path, "x")).embed(["a", "b"])
    assert CachedEmbedder("x", Endpoint, EmbeddingCache(tmp_path, "x")).embed(["b", "a"]) == first[::-1]
    assert first == [[0.1, 1 / 3, -2.5e-300], [0.2, 1 / 3, -2.5e-300]]


def _writer(directory: str, offset: int) -> None:
    class Counting:
        name = "n"

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(len(t)), float(offset)] for t in texts]

    cache = CachedEmbedder("n", Counting, EmbeddingCache(Path(directory), "n"))
    for i in range(40):
        cache.embed([f"text {j}" for j in range(i, i + 25)])


def test_processes_writing_one_cache_at_once_all_succeed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(str(tmp_path), k)) for k in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    seen = EmbeddingCache(tmp_path, "n").get([f"text {j}" for j in range(64)])
    assert len(seen) == 64 and all(v[0] == len(f"text {j}") for j, v in seen.items())


def test_a_damaged_cache_file_is_a_clear_error_naming_it(tmp_path: Path) -> None:
    writer = EmbeddingCache(tmp_path, "ns")
    CachedEmbedder("ns", Recording, writer).embed(TEXTS)
    path = writer.path
    with sqlite3.connect(path) as db:  # the vectors into the database file itself, out of the WAL
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # every page after the header's
    path.write_bytes(bytes(data))
    cache = EmbeddingCache(tmp_path, "ns")
    with pytest.raises(ConfigError, match=rf"AMARIS_EMBEDDING_CACHE {cache.path}: .*only a cache: delete the file"):
        CachedEmbedder("ns", Recording, EmbeddingCache(tmp_path, "ns")).embed(TEXTS)


def test_a_cache_path_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match=r"AMARIS_EMBEDDING_CACHE .*/cache/sub: cannot create the directory \(Not a directory\)"):
        make_embedder(MemorySettings(), {"AMARIS_EMBEDDING_CACHE": str(blocker / "sub")})


def test_a_loop_writes_the_same_files_with_the_cache_off_cold_and_warm(tmp_path: Path, judge) -> None:
    """Retrieval (retrieval.json's hits and distances), summaries and rubrics do not depend on the cache."""
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    cache = tmp_path / "vectors"
    runs = {}
    for arm, extra in (("off", {"AMARIS_EMBEDDING_CACHE": ""}), ("cold", {"AMARIS_EMBEDDING_CACHE": str(cache)}),
                       ("warm", {"AMARIS_EMBEDDING_CACHE": str(cache)})):
        run = tmp_path / arm
        assert invoke("init", run, "--config", config).exit_code == 0
        result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:3", "--quiet", env=judge_env(judge, **extra))
        assert result.exit_code == 0, result.stderr
        runs[arm] = outputs(run)
        hits = json.loads(invoke("memory", "search", "--run", run, "a note to the grader", "--json", env=extra).stdout)
        runs[arm]["search"] = json.dumps(hits).encode()
    assert runs["off"] == runs["cold"] == runs["warm"]
    assert any(json.loads(v).get("dynamic") for k, v in runs["off"].items() if k.endswith("retrieval.json"))
    assert list(cache.glob("*.sqlite"))


def test_a_read_only_view_of_a_record_its_writer_has_just_created_finds_nothing_yet(tmp_path: Path) -> None:
    """A run's record (RUN/embeddings) is read read-only by `memory search` and by a replay of the run. Its writer
    creates the file when it connects and the table a moment later (or never: it was killed in between): an
    empty file is a record with no vectors yet, not an error that blames the record; and the vectors its writer
    then puts are seen by the same view."""
    record = EmbeddingCache(tmp_path, "openai:m", wal=False)
    sqlite3.connect(record.path).close()  # connected, nothing written: the file exists, empty
    assert record.path.stat().st_size == 0
    view = EmbeddingCache(tmp_path, "openai:m", wal=False, read_only=True)
    assert view.get(TEXTS) == {}
    record.put(TEXTS[:1], [[0.5, 0.25]])
    assert view.get(TEXTS) == {0: [0.5, 0.25]}
    view.close()
    record.close()


def test_a_read_only_view_of_a_record_whose_writer_was_killed_mid_write_reads_what_it_had_committed(
        tmp_path: Path) -> None:
    """A writer killed inside a write leaves a hot journal beside the record (RUN/embeddings), which only a writer
    can roll back: a replay of the run, or `memory search`, reads it read-only and failed ("attempt to write a
    readonly database") until some writer of the run came by. The view reads what had been committed, and
    leaves the record's files as they were."""
    import os
    import signal
    import subprocess
    import sys

    record = EmbeddingCache(tmp_path, "openai:m", wal=False)
    record.put(TEXTS[:2], [[0.5], [0.25]])
    record.close()
    writer = subprocess.Popen([sys.executable, "-c", f"""
import sqlite3, time
db = sqlite3.connect({str(record.path)!r}, isolation_level=None)
db.execute("PRAGMA cache_size=1")  # pages go to the file before the commit: the journal is needed to undo them
db.execute("BEGIN IMMEDIATE")
db.executemany("INSERT INTO vectors VALUES (?, ?)", [(i.to_bytes(4, "big"), bytes(800)) for i in range(2000)])
print("inside", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE)
    assert writer.stdout is not None and writer.stdout.readline() == b"inside\n"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    journal = record.path.with_name(record.path.name + "-journal")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert journal.name in before

    view = EmbeddingCache(tmp_path, "openai:m", wal=False, read_only=True)
    assert view.get(TEXTS) == {0: [0.5], 1: [0.25]}
    view.close()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
