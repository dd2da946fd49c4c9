"""The event loop amaris's commands run on (amaris_cli/eventloop.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from amaris_cli import eventloop
from amaris_cli.session import Session

uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed here (amaris declares it except on Windows)")


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_commands_run_on_uvloop_unless_asked_for_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMARIS_EVENT_LOOP", raising=False)
    assert eventloop.run(_loop_module()).startswith("uvloop")
    monkeypatch.setenv("AMARIS_EVENT_LOOP", "asyncio")
    assert eventloop.run(_loop_module()).startswith("asyncio")


def test_a_session_runs_its_stages_on_the_one_loop_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Session.execute` (every command's stages) goes through eventloop.run, as `amaris serve` does."""

    class Client:
        async def aclose(self) -> None:
            pass

    monkeypatch.delenv("AMARIS_EVENT_LOOP", raising=False)
    session = Session.__new__(Session)
    session.client = Client()  # type: ignore[assignment]
    assert session.execute(_loop_module()).startswith("uvloop")


def test_a_stopped_sim_judge_leaves_no_file_open() -> None:
    """The sim-judge a session starts when no endpoint is configured (and every test's) runs its own loop in a
    thread, which stop() left unclosed: asyncio's loop closes itself when collected, uvloop's never does, so each
    sim-judge kept six file descriptors (126 after 20 judges, the listening sockets among them)."""
    import gc
    import os

    import openai

    from amaris_cli.simjudge.server import SimJudge

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd here")
    messages = [{"role": "user", "content": "Is 2 + 2 = 4?"}]
    with SimJudge() as judge:  # the first: what the process opens once (the SDK's imports)
        openai.OpenAI(base_url=judge.base_url, api_key="unused", max_retries=0).chat.completions.create(
            model="sim", messages=messages)  # type: ignore[arg-type]
    gc.collect()
    before = open_files()
    for _ in range(10):
        with SimJudge() as judge, openai.OpenAI(base_url=judge.base_url, api_key="unused", max_retries=0) as client:
            client.chat.completions.create(model="sim", messages=messages)  # type: ignore[arg-type]
    gc.collect()
    assert open_files() - before <= 2, open_files() - before


def test_a_command_called_inside_a_running_event_loop_says_so_as_asyncio_run_did() -> None:
    """A job called from a coroutine (a trainer's async reward function calling `score_job`) cannot run its own
    loop. asyncio.run said so at once; the runner opened as a context manager made its loop first, and its close
    then failed too: "Cannot run the event loop while another loop is running", raised while handling the first,
    with "coroutine 'Loop.shutdown_asyncgens' was never awaited"."""
    import gc
    import warnings

    async def inside() -> None:
        session = Session.__new__(Session)
        session.execute(_loop_module())

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="cannot be called from a running event loop") as raised:
            asyncio.run(inside())
        context = raised.value.__context__
        del raised  # its traceback holds the coroutines never awaited: their warnings are said here, not later
        gc.collect()
    assert context is None, repr(context)
    assert not [w for w in said if "shutdown_asyncgens" in str(w.message)], [str(w.message) for w in said]


def test_the_suites_commands_keep_the_loop_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """`AMARIS_EVENT_LOOP=asyncio pytest ...` tells a loop's fault from amaris's own, but the suite's helpers (invoke,
    clean_env: every `amaris serve` and worker it starts) dropped every AMARIS_* variable: its commands ran on
    uvloop whatever the variable said, and only the sim-judges took asyncio's loop."""
    import subprocess
    import sys

    from tests.conftest import clean_env

    monkeypatch.setenv("AMARIS_EVENT_LOOP", "asyncio")
    program = ("import asyncio; from amaris_cli import eventloop\n"
               "async def main(): return type(asyncio.get_running_loop()).__module__\n"
               "print(eventloop.run(main()))")
    done = subprocess.run([sys.executable, "-c", program], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("asyncio"), (done.stdout, done.stderr)


def test_a_cancelled_blocking_wait_with_finish_ends_only_once_its_thread_has() -> None:
    """Memory work (eventloop.blocking with `finish`) is cancelled at Ctrl-C, and the memory store is closed next:
    the task must not end while its thread still writes the store. Without `finish` it ends at once, as a wait for
    another process's evolution should."""
    import threading
    import time

    ended: dict[bool, float] = {}

    def work(stop: threading.Event, finish: bool) -> None:
        stop.wait(5)
        time.sleep(0.3)  # the batch in progress when the stop came
        ended[finish] = time.monotonic()

    async def cancelled(finish: bool) -> float:
        task = asyncio.create_task(eventloop.blocking(lambda stop: work(stop, finish), finish=finish))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic()

    returned = eventloop.run(cancelled(True))
    assert True in ended and returned >= ended[True], "the task ended before its thread"
    returned = eventloop.run(cancelled(False))
    time.sleep(0.5)
    assert returned < ended[False], "without finish, the task waited for its thread"


def test_memory_work_runs_off_the_event_loops_thread(tmp_path: Path, sim, monkeypatch: pytest.MonkeyPatch) -> None:
    """Embedding texts and the index's reads and writes (a step's indexing, an update's dynamic retrieval, the sync
    before it) ran on the event loop's thread in `evolve`, `summarize` and `update`: a big step's embedding held
    Ctrl-C to its end, and a wait for an embeddings endpoint that is down held every other instance's judge answers
    unread. A per-instance `loop` of two steps: every query and write of the memory happens in a worker thread."""
    from amaris_cli.memory.store import MemoryStore
    from tests.conftest import TEST_CONFIG, invoke, judge_env, write_jsonl
    from tests.test_per_instance import population

    seen: list[tuple[str, bool]] = []
    for name in ("query", "add", "set_mark"):
        def wrapper(self: MemoryStore, *args: object, _name: str = name, _original=getattr(MemoryStore, name),
                    **kwargs: object) -> object:
            seen.append((_name, asyncio._get_running_loop() is not None))  # a loop runs in this thread
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(MemoryStore, name, wrapper)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / "run"
    assert invoke("init", run, "--config", config, "--per-instance").exit_code == 0
    source = write_jsonl(tmp_path / "all.jsonl", population(0) + population(1))
    result = invoke("loop", source, "--run", run, env=judge_env(sim))
    assert result.exit_code == 0, result.stderr
    assert {name for name, _ in seen} == {"query", "add", "set_mark"}, seen  # step 1's updates searched step 0
    assert not [name for name, on_loop in seen if on_loop], seen


def test_a_cancelled_indexing_stops_at_its_next_batch_and_ends_before_the_store_closes(tmp_path: Path) -> None:
    """Ctrl-C while a big step is embedded (256 entries a batch; 10,000 rollouts took minutes): the indexing stops
    at its next batch, and its task ends once the thread has, so the store is closed (its lock released, the index
    scrubbed) with no thread writing it. On the loop's thread the embedding held Ctrl-C to its end."""
    import threading
    import time

    from amaris_cli.config import MemorySettings
    from amaris_cli.memory.digests import MemoryEntry
    from amaris_cli.memory.service import in_thread
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.rundir import RunDir
    from tests.conftest import new_run

    started = threading.Event()
    batches: list[float] = []

    class SlowEmbedder:
        """A batch in progress when the stop comes (the local model takes seconds for 256 texts): the first one
        ends 0.2 s after the stop, whenever that comes; a batch after it would take as long."""

        name = "slow-test-embedder"

        def embed(self, texts: list[str]) -> list[list[float]]:
            from amaris_cli.eventloop import stopping

            started.set()
            deadline = time.monotonic() + 5
            while not batches and not stopping() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
            batches.append(time.monotonic())
            return [[1.0, float(len(t)), 0.5] for t in texts]

    entries = [MemoryEntry(id=f"analysis:{i:05d}", type="analysis", step=0, instance_id=None, text=f"entry {i}")
               for i in range(256 * 4)]
    with MemoryStore(RunDir(new_run(tmp_path)), MemorySettings(), embedder=SlowEmbedder()) as store:

        async def cancelled_while_indexing() -> float:
            task = asyncio.create_task(in_thread(store, lambda: store.add(entries)))
            while not started.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return time.monotonic()

        returned = eventloop.run(cancelled_while_indexing())
        time.sleep(0.5)  # a batch still going would end by now
        assert len(batches) == 1, f"{len(batches)} of 4 batches embedded after the cancellation"
        assert returned >= batches[0], "the task ended while its thread still wrote the store"
        assert store.counts()["analysis"] == 256


def test_ctrl_c_while_a_failed_loop_stops_its_indexing_stops_the_command() -> None:
    """A step of `loop` failed while the step before it was indexed in the background: the loop stops that indexing
    (waiting for its thread's batch) and reports the step's error. A Ctrl-C or SIGTERM in that wait was swallowed
    with the indexing's own end, and the command exited with the step's error, not as stopped (130 or 143)."""
    import threading
    import time

    from amaris_cli.eventloop import stopping
    from amaris_cli.memory.service import in_thread
    from amaris_cli.stages.loop import Indexer

    ended = threading.Event()

    class Store:
        def __init__(self) -> None:
            self.turn = asyncio.Lock()

    def indexing() -> None:
        while not stopping():
            time.sleep(0.01)
        time.sleep(0.3)  # the batch in progress
        ended.set()

    async def failed_step_then_ctrl_c() -> None:
        store = Store()
        indexer = Indexer(store)  # type: ignore[arg-type]
        indexer._pending = asyncio.create_task(in_thread(store, indexing))  # type: ignore[arg-type]
        await asyncio.sleep(0.1)
        command = asyncio.current_task()
        assert command is not None
        asyncio.get_running_loop().call_later(0.1, command.cancel)  # Ctrl-C while the indexing stops
        try:
            raise RuntimeError("step 3 failed")
        except BaseException:
            await indexer.stop()
            raise

    with pytest.raises(asyncio.CancelledError):
        eventloop.run(failed_step_then_ctrl_c())
    assert ended.is_set(), "the command ended before the indexing's thread"
