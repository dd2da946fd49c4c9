"""Two runs share one memory on a real `chroma run` server on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from amaris_cli.config import MemorySettings
from amaris_cli.memory.store import MemoryStore
from amaris_cli.rundir import RunDir
from tests.conftest import EXAMPLES, TEST_CONFIG, free_port, invoke, judge_env, new_run

CHROMA = Path(sys.executable).parent / "chroma"


@pytest.fixture
def chroma_server(tmp_path: Path) -> Iterator[str]:
    if not CHROMA.exists():
        pytest.skip(f"the chroma server binary is not installed next to {sys.executable}")
    port = free_port()
    proc = subprocess.Popen([str(CHROMA), "run", "--path", str(tmp_path / "server"), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1).read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("chroma server did not start") from None
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)


def test_two_runs_share_one_memory_and_rebuild_touches_only_its_own(tmp_path: Path, sim, chroma_server: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    first, second = tmp_path / "job-a", tmp_path / "job-b"
    for run in (first, second):
        assert invoke("init", run, "--config", config).exit_code == 0
    env = judge_env(sim)
    # The jobs train on different data: another job's entry that says what one of the run's own says is no hit.
    result = invoke("loop", EXAMPLES / "recurring", "--run", first, "--steps", "0:2", "--memory-url", chroma_server,
                    env=env)
    assert result.exit_code == 0, result.stderr
    # (credentials in the URL are used, never written: provenance records the flag and the update's inputs)
    with_credentials = chroma_server.replace("http://", "http://amaris:pw-PLANTED-mem@")
    result = invoke("loop", EXAMPLES / "math", "--run", second, "--steps", "0:1", "--memory-url", with_credentials,
                    env=env)
    assert result.exit_code == 0, result.stderr
    assert not [p for p in second.rglob("*") if p.is_file() and b"pw-PLANTED-mem" in p.read_bytes()]
    retrieval = json.loads((second / "steps/000001/retrieval.json").read_text())
    from_first = [h for h in retrieval["dynamic"] if h["id"].startswith("job-a-")]
    assert from_first and all(h["text"] and h["step"] < 1 for h in from_first), retrieval["dynamic"]
    assert not (first / "memory" / "chroma.sqlite3").exists(), "the embedded store must not be used"

    search = ("memory", "search", "--run", second, "a note to the grader asking for full marks", "-n", "20",
              "--before-step", "3", "--memory-url", chroma_server, "--json")
    hits = json.loads(invoke(*search).stdout)
    assert any(h["id"].startswith("job-a-") for h in hits) and any(not h["id"].startswith("job-") for h in hits)
    rebuilt = json.loads(invoke("memory", "rebuild", "--run", second, "--memory-url", chroma_server, "--json").stdout)
    assert rebuilt["indexed"] == 2 * 16 + 2 + 2
    # its own entries, not the whole shared collection's (job-a's 3 steps beside them)
    assert rebuilt["counts"] == {"analysis": 2 * 16, "summary": 2, "update": 2}, rebuilt
    told = invoke("memory", "rebuild", "--run", second, "--memory-url", with_credentials)
    assert told.exit_code == 0 and f"rebuilt {chroma_server}" in told.stderr and "pw-PLANTED-mem" not in told.stderr
    after = json.loads(invoke(*search).stdout)
    assert [h["id"] for h in after if h["id"].startswith("job-a-")] == [h["id"] for h in hits if h["id"].startswith("job-a-")]

    # A replay of a run that shared the server keeps its own memory (the source's --memory-url and the shell's
    # AMARIS_MEMORY_URL alike): written there, its entries would join the ones the live jobs read as hits.
    replayed = tmp_path / "replayed"
    result = invoke("replay", second, "--out", replayed, env={**env, "AMARIS_MEMORY_URL": chroma_server})
    assert result.exit_code == 0, result.stderr
    assert "kept its memory in a shared Chroma server" in result.stdout + result.stderr
    assert (replayed / "memory" / "chroma.sqlite3").exists()
    assert "url" not in json.loads((replayed / "run.json").read_text())["config"].get("memory", {})
    everything = json.loads(invoke("memory", "search", "--run", second, "a note to the grader asking for full marks",
                                   "-n", "50", "--before-step", "9", "--memory-url", chroma_server, "--json").stdout)
    assert len(everything) > 20 and not [h["id"] for h in everything if h["id"].startswith("replayed-")]


def test_an_unreachable_memory_server_is_a_clear_error(tmp_path: Path, sim) -> None:
    run = new_run(tmp_path)
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", "--memory-url",
                    f"http://127.0.0.1:{free_port()}", env=judge_env(sim))
    assert result.exit_code == 1 and "cannot reach a Chroma server" in result.stderr


def test_a_run_whose_name_holds_a_bar_knows_its_own_entries(tmp_path: Path) -> None:
    """An entry's key in a shared memory is the run's key, "|", and the entry id. A run named `job|a` had a key that
    ended at its own "|", so it took its own entries for another job's (not indexed yet, not its own to rebuild)."""
    store = MemoryStore(RunDir(tmp_path / "job|a"), MemorySettings(url="http://127.0.0.1:9"), mode="reader")
    entry = "analysis:00000001:-:rollout|7"
    assert store.own(store.key(entry)) == entry
    other = MemoryStore(RunDir(tmp_path / "job"), MemorySettings(url="http://127.0.0.1:9"), mode="reader")
    assert other.own(store.key(entry)) is None
    # Entries an earlier version wrote for `job|a` (under the key it gave the run then) are still its own.
    old_key = f"job|a-{store.run_key.rsplit('-', 1)[1]}"
    assert store.own(f"{old_key}|{entry}") == entry and other.own(f"{old_key}|{entry}") is None



def test_a_run_named_with_a_bar_keeps_using_the_entries_an_earlier_version_wrote_under_its_old_key(
        tmp_path: Path, sim, chroma_server: str) -> None:
    """An earlier version keyed the entries of a run named `job|a` with the run's old key. They are the run's own:
    present (not indexed a second time under the new key), and the static entries the update shows in full (its
    recent summaries and updates) are excluded from its dynamic hits whichever key they carry."""
    import chromadb

    from amaris_cli.memory.service import RunCatalog, dynamic_retrieval, static_retrieval
    from amaris_cli.memory.store import run_keys

    run = new_run(tmp_path, "job|a")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", "--memory-url", chroma_server,
                    env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    new, old = run_keys(RunDir(run))
    port = int(chroma_server.rsplit(":", 1)[1])
    for collection in chromadb.HttpClient(host="127.0.0.1", port=port).list_collections():
        # The memory as the earlier version wrote it: every entry of the run under the key it gave the run then.
        got = collection.get(include=["embeddings", "metadatas", "documents"])
        collection.delete(ids=got["ids"])
        collection.add(ids=[i.replace(f"{new}|", f"{old}|", 1) for i in got["ids"]],
                       embeddings=[list(v) for v in got["embeddings"]],
                       metadatas=[{**m, "run": old} for m in got["metadatas"]], documents=got["documents"])

    static = static_retrieval(RunDir(run), 2, 2)
    assert {e.type for e in static} == {"summary", "update"}
    settings = RunDir(run).settings().memory.model_copy(update={"url": chroma_server})
    with MemoryStore.open(RunDir(run), settings, "reader") as store:
        for entry_type in ("summary", "update"):
            ids = sorted(e.id for e in static if e.type == entry_type)
            assert store.existing(ids, entry_type) == set(ids)  # present: a sync does not add them again
        hits = dynamic_retrieval(store, RunCatalog(RunDir(run)), ["a note to the grader asking for full marks"], 100, 2,
                                 static)
    assert hits and not any(h.id.startswith(old) for h in hits)  # read as the run's own entries
    assert not {h.id for h in hits} & {e.id for e in static}, "a static entry among the dynamic hits"


def test_a_shared_memory_an_earlier_version_created_is_widened_when_the_server_restarts_and_the_writer_says_so(
        tmp_path: Path, chroma_server: str) -> None:
    """store._open widens (ef_search 512) a collection an earlier version created at ChromaDB's default, with
    `collection.modify`. A running server whose index is loaded (another job searched it) keeps searching at the
    width it loaded: the stored configuration says 512 from then on, so no later open widens it again, and the
    search stays as approximate as before until the server restarts. The writer that widens it says so. Same
    5,000 random entries as test_retrieval_quality's embedded case, where at most 2 of 200 queries miss."""
    import chromadb

    from amaris_cli.memory.store import EF_SEARCH, run_keys
    from tests.planted_history import RandomEmbedder, random_memory

    memory = random_memory()
    entries, queries, vectors, asked, exact = memory.entries, memory.queries, memory.vectors, memory.asked, memory.exact
    embedder = RandomEmbedder()
    port = int(chroma_server.rsplit(":", 1)[1])
    server = chromadb.HttpClient(host="127.0.0.1", port=port)
    earlier = server.get_or_create_collection("amaris-analyses", embedding_function=None,
                                              configuration={"hnsw": {"space": "cosine"}})
    run = RunDir(new_run(tmp_path, "job"))
    key = run_keys(run)[0]
    for start in range(0, len(entries), 1000):  # the earlier version's job indexes, and searches: the server loads it
        batch = entries[start:start + 1000]
        earlier.add(ids=[f"{key}|{e.id}" for e in batch], embeddings=vectors[start:start + 1000].tolist(),
                    metadatas=[{"step": e.step, "type": e.type, "instance_id": "", "run": key} for e in batch],
                    documents=[e.text for e in batch])
    earlier.query(query_embeddings=asked[:1].tolist(), n_results=3)
    settings, said = MemorySettings(url=chroma_server), []
    with MemoryStore(run, settings, mode="writer", say=said.append, embedder=embedder) as store:
        assert store.counts()["analysis"] == 5000
        found = [[store.own(k) for k, *_ in hits][:3] for hits in store.query(queries, 3, before_step=10**6)]
    with pytest.warns(DeprecationWarning, match="legacy embedding function config"):  # ChromaDB's (store.py)
        assert server.get_collection("amaris-analyses").configuration["hnsw"]["ef_search"] == EF_SEARCH
    assert len(said) == 1 and "amaris-analyses" in said[0] and "restart" in said[0], said
    misses = sum(f != e for f, e in zip(found, exact, strict=True))
    assert misses > 2, "the server now applies a wider search at once: drop the restart message (store._open)"
    with MemoryStore(run, settings, mode="writer", say=said.append, embedder=embedder) as store:
        store.counts()
    assert len(said) == 1, "widened once: said once"



def test_a_moved_run_keeps_its_entries_and_a_copy_gets_a_key_of_its_own(tmp_path: Path, sim, chroma_server: str) -> None:
    """The key of a run's entries came from its path: a run moved after steps 0-1 took its own entries for another
    job's (its step 2's update saw its summaries twice, as static entries and as another job's hits). The key is
    kept with the run; a copy (its original still holding the key) gets one of its own, since the two part, and
    indexes its history under it."""
    import shutil

    from amaris_cli.memory.store import run_keys

    env = judge_env(sim)
    run = new_run(tmp_path, "job")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", "--memory-url", chroma_server, env=env)
    assert result.exit_code == 0, result.stderr
    key = run_keys(RunDir(run))[0]
    copy = Path(shutil.copytree(run, tmp_path / "job-copy"))
    moved = run.rename(tmp_path / "job-moved")
    for where in (moved, copy):
        result = invoke("loop", EXAMPLES / "math", "--run", where, "--steps", "2:2", "--memory-url", chroma_server,
                        env=env)
        assert result.exit_code == 0, result.stderr
    assert run_keys(RunDir(moved))[0] == key and run_keys(RunDir(copy))[0] != key
    hits = json.loads((moved / "steps/000002/retrieval.json").read_text())["dynamic"]
    assert hits and not [h["id"] for h in hits if h["id"].startswith(f"{key}|")], "its own entries read as another job's"
    # The copy holds its history under its own key (its copied marks were the original's key's: it indexed
    # nothing, and read its own history as the original's entries); the original's entries of steps 0-1 say what
    # the copy's say, and are not read again beside them.
    copied = json.loads((copy / "steps/000002/retrieval.json").read_text())["dynamic"]
    assert copied and not [h["id"] for h in copied if h["id"].startswith(f"{key}|")], copied
    assert len({h["text"] for h in copied}) == len(copied)


def test_a_run_that_changes_memory_stores_indexes_its_history_into_the_store_it_uses(
        tmp_path: Path, sim, chroma_server: str) -> None:
    """Which steps are indexed was kept once per run, whichever store held them: steps 0-1 indexed in the run's
    embedded memory read as indexed when step 2 used a shared server (which never got them: its dynamic
    retrieval found none of the run's history), and step 2, indexed on the server, read as indexed back in the
    embedded memory."""
    env = judge_env(sim)
    run = new_run(tmp_path, "job")
    for steps, url in (("0:1", None), ("2:2", chroma_server), ("3:3", None)):
        flags = ("--memory-url", url) if url else ()
        result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", steps, *flags, env=env)
        assert result.exit_code == 0, result.stderr
    shared = RunDir(run).settings().memory.model_copy(update={"url": chroma_server})
    with MemoryStore.open(RunDir(run), shared, "reader") as store:
        assert store.counts() == {"analysis": 3 * 16, "summary": 3, "update": 3}  # steps 0-2 (0-1 had been indexed)
    with MemoryStore.open(RunDir(run), RunDir(run).settings().memory, "reader") as store:
        assert store.counts() == {"analysis": 4 * 16, "summary": 4, "update": 4}  # steps 0-3 (2 had been, on the server)
    hits = json.loads((run / "steps/000002/retrieval.json").read_text())["dynamic"]
    assert hits and all(h["step"] < 2 for h in hits)


def test_a_run_whose_server_marks_an_earlier_version_kept_indexes_its_history_in_its_embedded_memory(
        tmp_path: Path, sim, chroma_server: str) -> None:
    """Earlier versions kept a server's marks in memory/indexed-steps.json, now the embedded memory's file: a run that
    used a server with them and goes on in its embedded memory read its steps as indexed there, where nothing is."""
    env = judge_env(sim)
    run = new_run(tmp_path, "job")
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", "--memory-url", chroma_server, env=env)
    assert result.exit_code == 0, result.stderr
    (server_marks,) = (run / "memory").glob("indexed-steps.shared-*.json")
    server_marks.rename(run / "memory" / "indexed-steps.json")  # where an earlier version kept them
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "2:2", env=env)
    assert result.exit_code == 0, result.stderr
    with MemoryStore.open(RunDir(run), RunDir(run).settings().memory, "reader") as store:
        assert store.counts() == {"analysis": 3 * 16, "summary": 3, "update": 3}
