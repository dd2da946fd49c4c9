"""Locks that let several processes share one run directory, by what each one writes.

A run directory is written by many short processes at once: `score` of step t+1 while `evolve` of
step t runs in the background, readers (`rewards`, `inspect`, `report`, `memory search`) at any time.
So there is no lock on the whole run, only on the things that must have one writer:

  .locks/step-NNNNNN.lock   the files of one step (score, evolve, analyze, summarize, update, loop)
  .locks/memory.lock        the embedded ChromaDB store: one process holds it while its client is open
                            (two clients writing one path silently lose vectors: ../shared/CHROMA.md)
  .locks/memory-io.lock     held exclusively around each write to the store, shared by a reader while it
                            copies the store, so a reader's copy is never taken mid-write
  .locks/manifest.lock      read-modify-write of run.json

They are `flock` locks: the OS releases them when their holder dies, so a lock left by a killed
process is simply taken over. A holder writes its pid and command line into the lock file, so a
second writer can say who is in the way. Readers never take an exclusive lock, and on a read-only
run directory they only probe locks that already exist.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from amaris_cli.errors import RunLockedError, WaitTimeout

LOCKS_DIR = ".locks"
POLL_S = 0.1
# A lock held by no one who has written a role is a reader probing it (holder_of holds it shared for
# an instant) or a writer between taking it and writing its role: both are gone within microseconds.
UNNAMED_GRACE_S = 0.5


def lock_path(run_path: Path, name: str) -> Path:
    return run_path / LOCKS_DIR / f"{name}.lock"


def step_lock_name(step: int) -> str:
    return f"step-{step:06d}"


def this_command() -> str:
    """This process as a person would have typed it."""
    return f"pid {os.getpid()}: {shlex.join(['amaris', *sys.argv[1:]])}"


def _read(fd: int) -> tuple[str, str]:
    """(role, holder) as written by the holder: `ROLE\tpid N: amaris ...`."""
    text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
    role, sep, who = text.partition("\t")
    if not sep:
        role, who = "", text
    return role, who or "another amaris process"


def holder_of(path: Path) -> tuple[str, str] | None:
    """(role, pid and command line) of the process holding the lock at `path`, or None when nobody
    does. Opens the file read-only and never creates it, so it works on a read-only run directory."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def holder(path: Path) -> str | None:
    found = holder_of(path)
    return found[1] if found else None


def _readers_only(fd: int) -> bool:
    """Whether the lock that `fd` (holding none) could not take exclusively is held shared only: by readers."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def _open_for_lock(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


@contextmanager
def exclusive(path: Path, what: str, *, wait: float = 0.0, on_wait: Callable[[str], None] | None = None,
              role: str = "", wait_for: tuple[str, ...] | None = None,
              stop: threading.Event | None = None) -> Iterator[None]:
    """Hold the lock at `path` exclusively, as `role` (written for others to read with the holder's
    command line). With `wait` = 0 a held lock is an error (exit 3) naming the holder; with `wait` > 0
    this waits up to that many seconds, telling `on_wait` once who it waits for — only for holders
    whose role is in `wait_for` when that is given (others are an error at once). `stop`: set when the caller was
    cancelled (Ctrl-C; eventloop.blocking): the wait ends (schedule.Stopped)."""
    fd = _open_for_lock(path)
    try:
        started = time.monotonic()
        deadline = started + wait
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # Held shared, it is held by readers (holder_of probing it), whatever role a writer killed by SIGKILL
                # left written in the file: a holder not named, as below
                other_role, other = ("", "readers, holding it shared") if _readers_only(fd) else _read(fd)
                if not other_role and time.monotonic() < started + UNNAMED_GRACE_S:
                    time.sleep(0.002)  # not a writer in the way (yet): never exit 3 because a reader looked
                    continue
                # An empty role is a holder that has not written itself yet: wait a moment for it too.
                if wait <= 0 or (wait_for is not None and other_role and other_role not in wait_for):
                    raise RunLockedError(f"{what} is being written by another amaris process ({other}); "
                                         "wait for it to finish") from None
                if time.monotonic() >= deadline:
                    raise WaitTimeout(f"gave up after {wait:g}s waiting for {what}, still held by {other}") from None
                if on_wait is not None and not told:
                    on_wait(f"waiting for {what} (held by {other})")
                    told = True
                if stop is None:
                    time.sleep(POLL_S)
                elif stop.wait(POLL_S):
                    from amaris_cli.schedule import Stopped

                    raise Stopped(what) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{role}\t{this_command()}".encode(), 0)
        except OSError as exc:  # a full disk: say which file, as every other write does
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def step(run_path: Path, step_number: int, role: str, *, wait: float = 0.0,
         on_wait: Callable[[str], None] | None = None, wait_for: tuple[str, ...] | None = None) -> Any:
    """The lock of one step's files, held as `role` (see `exclusive`)."""
    return exclusive(lock_path(run_path, step_lock_name(step_number)), f"step {step_number} of {run_path}", wait=wait,
                     on_wait=on_wait, role=role, wait_for=wait_for)


@contextmanager
def shared(path: Path) -> Iterator[None]:
    """A reader's shared hold of the lock at `path`, if the file exists (else nothing to wait for)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@contextmanager
def brief(path: Path) -> Iterator[None]:
    """A short exclusive section (an append, a read-modify-write): waits without a message."""
    fd = _open_for_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
