"""amaris_cli/preload.py: heavy imports ahead of need, one at a time, in one background thread."""

from __future__ import annotations

import threading
import time

from amaris_cli import preload


def _settled_within(seconds: float) -> bool:
    done = threading.Event()
    threading.Thread(target=lambda: (preload.settle(), done.set()), daemon=True).start()
    return done.wait(seconds)


def test_jobs_run_one_after_the_other_in_one_thread_and_settle_waits_for_them() -> None:
    seen: list[tuple[str, str, float, float]] = []

    def job(name: str) -> None:
        started = time.monotonic()
        time.sleep(0.1)
        seen.append((name, threading.current_thread().name, started, time.monotonic()))

    preload.ahead(lambda: job("sdk"))
    preload.ahead(lambda: job("memory"))
    preload.settle()
    assert [name for name, *_ in seen] == ["sdk", "memory"]  # both done when settle returns, in order
    assert {thread for _, thread, *_ in seen} == {"amaris-preload"}
    assert seen[1][2] >= seen[0][3], "the second import started before the first one ended"


def test_a_job_queued_as_the_thread_ends_still_runs() -> None:
    """Each job queued after the thread found its queue empty (right after settle() returned) runs: the
    thread is started again. (The moment the ending thread is still alive is too short to hit here; the
    `_running` flag, not the thread's liveness, is what closes it.)"""
    ran: list[int] = []

    def queue_and_settle() -> None:
        for i in range(2000):
            preload.ahead(lambda i=i: ran.append(i))
            preload.settle()

    worker = threading.Thread(target=queue_and_settle, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), f"settle() hung after {len(ran)} jobs"
    assert ran == list(range(2000))


def test_a_failing_job_does_not_stop_the_next_and_settle_inside_a_job_returns() -> None:
    ran: list[str] = []

    def fails() -> None:
        raise ImportError("no module named nowhere")

    def settles() -> None:
        preload.settle()  # the code a job imports may call it: it must not wait for itself
        ran.append("settled")

    preload.ahead(fails)
    preload.ahead(settles)
    assert _settled_within(10)
    assert ran == ["settled"]


def test_httpx_is_whole_before_the_first_request() -> None:
    """The SDK takes attributes of `sys.modules.get("httpx")` on every response; a thread importing httpx
    (ChromaDB's import) left it half initialized there, and an evolution's request died of "partially
    initialized module 'httpx' has no attribute 'Response'". The client imports httpx with the SDK."""
    import subprocess
    import sys

    code = ("import sys\nfrom amaris_cli.config import Settings\nfrom amaris_cli.llm.client import LLMClient\n"
            "settings = Settings()\nassert 'httpx' not in sys.modules, 'imported before the client: test nothing'\n"
            "LLMClient(settings, environ={})._client(settings.agent('scorer'))\n"
            "print(type(sys.modules['httpx'].Response).__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "type", done.stderr


def test_a_process_that_exits_while_a_job_runs_lets_it_finish(tmp_path) -> None:
    """The interpreter's exit waits for the imports in flight (preload._finish) instead of stopping the daemon
    thread inside them."""
    import subprocess
    import sys

    marker = tmp_path / "finished"
    program = ("import time\nfrom amaris_cli import preload\n"
               f"preload.ahead(lambda: (time.sleep(0.5), open({str(marker)!r}, 'w').close()))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert marker.exists(), "the process exited in the middle of a preload job"


def test_a_job_imports_without_the_collector_and_freezes_only_what_it_imported(tmp_path, monkeypatch) -> None:
    """A job runs with the cyclic collector off; the objects are frozen after a job that imported a module,
    and not after one that imported nothing (serve's worker preloads on every step: a freeze each time
    would keep for good whatever cycles the running evolution holds)."""
    import gc
    import sys

    (tmp_path / "amaris_preload_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "amaris_preload_probe", raising=False)
    seen: list[bool] = []

    def importing() -> None:
        seen.append(gc.isenabled())
        import amaris_preload_probe  # noqa: F401

    frozen = gc.get_freeze_count()
    preload.ahead(lambda: seen.append(gc.isenabled()))
    preload.settle()
    assert seen == [False] and gc.isenabled()
    assert gc.get_freeze_count() == frozen, "a job that imported nothing froze the process's objects"
    gc.collect()  # nothing new to freeze but what was made meanwhile
    frozen = gc.get_freeze_count()
    preload.ahead(importing)
    preload.settle()
    assert seen == [False, False] and gc.isenabled()
    assert gc.get_freeze_count() > frozen, "the objects of a job's imports were not frozen"
