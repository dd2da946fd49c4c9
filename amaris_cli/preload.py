"""Heavy imports ahead of need, in one background thread.

A command imports the openai SDK (and an evolution ChromaDB and the embedding model) while it waits for
something else: its rollouts, its step's lock, an earlier evolution. Two threads must never import these
packages at the same time: Python breaks an import deadlock between threads by handing one of them a
partially initialized module (an evolution died of "partially initialized module 'httpx' has no attribute
'Response'" when the SDK's import in one thread met ChromaDB's in another). So every preload runs in one
thread, one after the other, and the code that imports these packages itself calls `settle()` first: it
waits until the preloads in flight are done, and then finds the modules loaded.

The cyclic garbage collector is off while a preload runs: these imports create some 10^5 objects that live
as long as the process, and Python 3.11 runs a full collection each time the long-lived objects grew by a
quarter, over an ever larger heap (a fifth of the CPU of importing the SDK, ChromaDB and onnxruntime). Once
the imports are done, the objects that exist are moved out of later collections (gc.freeze: they are
modules, classes and the command's own state) and collection resumes.
"""

from __future__ import annotations

import atexit
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pending: list[Callable[[], None]] = []
_idle = threading.Event()
_idle.set()
_thread: threading.Thread | None = None
_running = False  # under _lock: the preload thread takes further jobs (it may be alive a moment longer)
EXIT_WAIT_S = 30.0  # the longest a process's exit waits for imports in flight
_exit_hooked = False


def ahead(job: Callable[[], None]) -> None:
    """Run `job` (imports) in the preload thread, after the jobs queued before it. A job's error is
    ignored: the code that needs the import does it again and reports the error there."""
    global _thread, _running, _exit_hooked
    with _lock:
        _pending.append(job)
        _idle.clear()
        if not _exit_hooked:
            _exit_hooked = True
            atexit.register(_finish)
        if not _running:
            _running = True
            _thread = threading.Thread(target=_run, name="amaris-preload", daemon=True)
            _thread.start()


def _run() -> None:
    global _running
    while True:
        with _lock:
            if not _pending:
                _running = False
                _idle.set()
                return
            job = _pending.pop(0)
        try:
            with without_collection():
                job()
        except Exception:  # noqa: BLE001 - see ahead()
            pass


@contextmanager
def without_collection() -> Iterator[None]:
    """Imports without the cyclic garbage collector, their objects frozen after (see the module's docstring).
    A no-op when collection is already off (a preload inside another, or the user turned it off). Nothing is
    frozen when nothing was imported: a freeze also keeps for good the cycles the other threads hold at that
    moment, once a process, not on every job of a long-lived one (serve's worker preloads on every step)."""
    if not gc.isenabled():
        yield
        return
    modules = len(sys.modules)
    gc.disable()
    try:
        yield
    finally:
        if len(sys.modules) > modules:
            gc.freeze()
        gc.enable()


def settle() -> None:
    """Wait for the preloads queued so far (call it before importing what they import)."""
    if threading.current_thread() is not _thread:
        _idle.wait()


def _finish() -> None:
    """At exit, let the imports in flight end: the interpreter would stop the daemon thread inside a C
    extension's initialization (onnxruntime's, ChromaDB's), whose threads then die with the process in
    C++'s std::terminate ("terminate called without an active exception", exit -6)."""
    _idle.wait(EXIT_WAIT_S)
