"""The run's locks (amaris_cli/locks.py): a reader looking at a lock must never be taken for a writer.

Readers find out who writes a step (`inspect`, `report`, a `score` or `evolve` waiting for an
evolution polls every 0.1 s) by trying the step's flock shared for an instant. A writer that tries
the lock in that instant used to fail at once: exit 3, "being written by another amaris process
(another amaris process)", although nobody was writing. A trainer's `score` lost its step to a
monitoring `inspect`.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from amaris_cli import locks
from amaris_cli.errors import RunLockedError
from amaris_cli.rundir import RunDir


def _look(path: Path, stop: multiprocessing.synchronize.Event, ready: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        locks.holder(path)
        ready.set()


def test_a_reader_probing_a_step_lock_never_makes_its_writer_exit_3(tmp_path: Path) -> None:
    path = RunDir(tmp_path).step_lock_path(0)
    path.parent.mkdir(parents=True)
    path.touch()
    failures = _writers_beside_a_probing_reader(path, 500)
    assert not failures, f"{len(failures)} of 500 writers gave up on a reader: {failures[0]}"


def _writers_beside_a_probing_reader(path: Path, tries: int, before: Callable[[], object] = lambda: None) -> list[str]:
    """`tries` writers take the lock at `path` (each after `before()`) while a reader process probes it in a loop:
    the errors of those that gave up."""
    context = multiprocessing.get_context("fork")
    stop, ready = context.Event(), context.Event()
    reader = context.Process(target=_look, args=(path, stop, ready))
    reader.start()
    failures: list[str] = []
    try:
        assert ready.wait(10), "the reader did not start"
        for _ in range(tries):
            before()
            try:
                with locks.exclusive(path, "step 0", role="score"):
                    pass
            except RunLockedError as exc:
                failures.append(str(exc))
    finally:
        stop.set()
        reader.join(10)
    assert reader.exitcode == 0
    return failures


def _hold_and_wait(path: Path, role: str, held: multiprocessing.synchronize.Event) -> None:
    with locks.exclusive(path, "step 0", role=role):
        held.set()
        while True:  # until SIGKILL: its role stays written in the lock file
            time.sleep(1)


def test_a_reader_probing_the_lock_of_a_killed_writer_never_makes_the_next_writer_exit_3(tmp_path: Path) -> None:
    """A writer killed by SIGKILL (the OOM killer, a preempted job) cannot clear its role from the lock file. The
    next writer that tried the lock while a reader probed it found that role there and took the reader for the dead
    writer: exit 3 naming a process that no longer exists (for `evolve`, which waits only for a `score`, too)."""
    path = RunDir(tmp_path).step_lock_path(0)
    context = multiprocessing.get_context("fork")
    held = context.Event()
    killed = context.Process(target=_hold_and_wait, args=(path, "evolve", held))
    killed.start()
    assert held.wait(10), "the first writer did not take the lock"
    os.kill(killed.pid, signal.SIGKILL)
    killed.join(10)
    assert path.read_text().startswith("evolve\t")  # what a killed writer leaves
    # Deterministic: a reader holds the lock shared, as locks.holder does for an instant, while the writer tries it.
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    threading.Timer(0.3, os.close, (fd,)).start()
    with locks.exclusive(path, "step 0", role="evolve", wait=5, wait_for=("score",)):
        assert path.read_text().startswith(f"evolve\tpid {os.getpid()}:")
    # And as it happens: a reader probing in a loop, the writers trying it between, each after a killed writer.
    failures = _writers_beside_a_probing_reader(
        path, 300, lambda: path.write_text(f"score\tpid {killed.pid}: amaris score R.jsonl --run R --step 0"))
    assert not failures, f"{len(failures)} of 300 writers gave up on a reader after a killed writer: {failures[0]}"
