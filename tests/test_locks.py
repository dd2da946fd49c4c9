"""The run's locks (amaris_cli/locks.py): a reader looking at a lock must never be taken for a writer.

Readers find out who writes a step (`inspect`, `report`, a `score` or `evolve` waiting for an
evolution polls every 0.1 s) by trying the step's flock shared for an instant. A writer that tries
the lock in that instant used to fail at once: exit 3, "being written by another amaris process
(another amaris process)", although nobody was writing. A trainer's `score` lost its step to a
monitoring `inspect`.
"""

from __future__ import annotations

import multiprocessing
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
    context = multiprocessing.get_context("fork")
    stop, ready = context.Event(), context.Event()
    reader = context.Process(target=_look, args=(path, stop, ready))
    reader.start()
    failures: list[str] = []
    try:
        assert ready.wait(10), "the reader did not start"
        for _ in range(500):
            try:
                with locks.exclusive(path, "step 0", role="score"):
                    pass
            except RunLockedError as exc:
                failures.append(str(exc))
    finally:
        stop.set()
        reader.join(10)
    assert reader.exitcode == 0
    assert not failures, f"{len(failures)} of 500 writers gave up on a reader: {failures[0]}"
