"""A reader's private directory in the temporary directory, and the removal of those that killed readers left.

A reader of an embedded memory (`memory search`, `inspect`, retrieval beside a writer) copies the store there so that
it never reads one mid-write, and removes the copy when it closes. A reader killed by SIGKILL or the OOM killer
cannot, and the copy is as big as the memory (225 MB at 100,000 analyses): a training job preempted every few
hours would fill the disk. So each directory holds an flock on its owner file for as long as its process lives
(the OS releases it when the process dies, however it dies), and the next reader removes its own user's
directories whose lock nobody holds.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import secrets
import shutil
import tempfile
from pathlib import Path

OWNER = "owner.lock"
_LIVE: set[Path] = set()  # this process's directories, until removed


@atexit.register
def _remove_left() -> None:
    """An interrupt (Ctrl-C, SIGTERM) in the instant between making a directory and handing it to its owner left it
    to no one: the process removes it as it exits."""
    for path in list(_LIVE):
        shutil.rmtree(path, ignore_errors=True)


def _made(prefix: str) -> Path:
    """A new directory PREFIX* (mode 0700, as mkdtemp makes it), in _LIVE before it exists: an interrupt in the instant
    after it is made (a test's SIGTERM as soon as it appears) still finds it there."""
    for _ in range(100):  # bounded, as mkdtemp's own attempts are
        path = Path(tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(6)}"
        _LIVE.add(path)
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            _LIVE.discard(path)
    raise FileExistsError(f"no unused name for a directory {prefix}* in {tempfile.gettempdir()}")


class PrivateDirectory:
    """A directory named PREFIX* in the temporary directory, removed by `remove` or, once this process is gone,
    by the next PrivateDirectory of the same prefix."""

    def __init__(self, prefix: str) -> None:
        remove_orphans(prefix)
        self._fd: int | None = None
        self.path = _made(prefix)
        try:
            # Locked before it takes the owner's name: a sweep opens only that name, so it never sees it unlocked.
            unnamed = self.path / f"{OWNER}.new"
            self._fd = os.open(unnamed, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            os.rename(unnamed, self.path / OWNER)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        _LIVE.discard(self.path)
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def remove_orphans(prefix: str) -> list[Path]:
    """Remove this user's PREFIX* directories whose owner is gone; the removed paths. Directories without an owner
    file (made by an earlier version, or being made this instant) are left alone."""
    removed: list[Path] = []
    temp = Path(tempfile.gettempdir())
    try:
        entries = list(os.scandir(temp))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        with contextlib.suppress(OSError):
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
            fd = os.open(Path(entry.path) / OWNER, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its reader is alive
            finally:
                os.close(fd)
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed
