"""Reading one input file safely: its kind checked first, its size capped, its bytes hashed.

An input may be a regular file (a symlink to one is followed) or a pipe: a named FIFO or the
`/dev/fd/N` of a shell process substitution (`amaris score <(jq -c ... f.jsonl)`). A pipe is read
once, in full, and the SHA-256 is of the bytes actually read, so the hash a run records is of what
it scored. Everything else (a directory, `/dev/zero` and other devices, a socket) is refused
before it is opened, so nothing blocks and nothing is read without end.

A FIFO that no process ever opens for writing is given up after `FIFO_WRITER_WAIT_S` seconds;
once a writer is connected, reading waits for it to finish (a slow `jq` is fine; Ctrl-C stops it).
"""

from __future__ import annotations

import errno
import hashlib
import os
import select
import stat
import time
from pathlib import Path

from amaris_cli.errors import InputError

MAX_INPUT_BYTES = 4 << 30  # 4 GiB: one input file is held in memory while it is validated
FIFO_WRITER_WAIT_S = 10.0
NOT_FOUND = "file not found"  # the reason of an InputError for a path that names nothing (callers tell it apart)
_CHUNK = 1 << 20


def describe_kind(mode: int) -> str:
    """A file kind in words, for messages."""
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def stat_problem(path: Path, exc: OSError) -> str:
    """Why `os.stat(path)` failed, in words (a dangling or looping symlink is named as such)."""
    if exc.errno == errno.ELOOP:
        return "symlink loop (the link points back to itself)"
    if isinstance(exc, FileNotFoundError):
        if os.path.islink(path):
            return f"dangling symlink (points to {os.readlink(path)!r}, which does not exist)"
        return NOT_FOUND
    if isinstance(exc, PermissionError):
        return "permission denied"
    if exc.errno == errno.ENOTDIR:
        return "file not found (a part of the path is not a directory)"
    return f"cannot read: {exc.strerror or exc}"


def input_stat(path: Path) -> os.stat_result:
    """`os.stat` (following symlinks) with every failure turned into an InputError."""
    try:
        return os.stat(path)
    except OSError as exc:
        raise InputError(path, stat_problem(path, exc)) from None


def read_input_bytes(path: Path, max_bytes: int = MAX_INPUT_BYTES,
                     writer_wait: float | None = None, expected: str = "a JSONL file") -> tuple[bytes, str]:
    """The whole content of an input file or pipe and the SHA-256 (hex) of exactly those bytes.
    `writer_wait` defaults to FIFO_WRITER_WAIT_S (read at call time); `expected` names the input in messages."""
    path = Path(path)
    writer_wait = FIFO_WRITER_WAIT_S if writer_wait is None else writer_wait
    mode = input_stat(path).st_mode
    if stat.S_ISDIR(mode):
        raise InputError(path, f"is a directory, expected {expected}")
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        raise InputError(path, f"is a {describe_kind(mode)}, expected {expected} or a pipe")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is waited for below, bounded).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(path, stat_problem(path, exc)) from None
    try:
        opened = os.fstat(fd).st_mode
        if stat.S_IFMT(opened) != stat.S_IFMT(mode):  # swapped between stat and open
            raise InputError(path, f"changed kind while being opened (now a {describe_kind(opened)})")
        if stat.S_ISREG(opened):
            data = _read_regular(path, fd, max_bytes)
        else:
            data = _read_pipe(path, fd, max_bytes, writer_wait)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return data, hashlib.sha256(data).hexdigest()


def format_size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _too_big(path: Path, size: str, max_bytes: int) -> InputError:
    return InputError(path, f"input is {size} bytes, over the {format_size(max_bytes)} input limit; "
                            "split it into several files")


def _read_regular(path: Path, fd: int, max_bytes: int) -> bytes:
    size = os.fstat(fd).st_size
    if size > max_bytes:
        raise _too_big(path, str(size), max_bytes)
    chunks: list[bytes] = []
    total = 0
    while True:  # bounded: at most max_bytes + 1 bytes are read (a growing file stops at the cap)
        chunk = os.read(fd, min(max(size - total, _CHUNK), max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise _too_big(path, f"more than {max_bytes}", max_bytes)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _read_pipe(path: Path, fd: int, max_bytes: int, writer_wait: float) -> bytes:
    """Read a pipe to its end. Linux reports POLLHUP on a FIFO only after a writer has come and
    gone, and a non-blocking read returns EAGAIN while a writer is connected but silent, so a
    FIFO nobody writes to is told apart from a slow writer."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    deadline = time.monotonic() + writer_wait
    # An anonymous pipe (`<(...)`, `/dev/stdin` from `|`) had a writer from its creation: an empty
    # read on it is the end. Only a named FIFO can be waiting for its first writer.
    writer_seen = _is_anonymous_pipe(fd)
    chunks: list[bytes] = []
    total = 0
    while True:
        if not writer_seen and time.monotonic() > deadline:
            raise InputError(path, f"no process wrote to this pipe within {writer_wait:g} s "
                                   "(start the writer first, or pass a regular file)")
        events = poller.poll(200 if not writer_seen else 1000)
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:  # a writer is connected but has nothing yet
            writer_seen = True
            continue
        if chunk:
            writer_seen = True
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise _too_big(path, f"more than {max_bytes}", max_bytes)
            continue
        # An empty read is the end once a writer has been there; before that it means nobody
        # has opened the pipe for writing yet (no POLLHUP), so keep waiting until the deadline.
        if writer_seen or any(ev & select.POLLHUP for _, ev in events):
            return b"".join(chunks)



def _is_anonymous_pipe(fd: int) -> bool:
    """Anonymous pipes all live on the kernel's pipe file system: same device as a fresh pipe's."""
    probe_read, probe_write = os.pipe()
    try:
        return os.fstat(fd).st_dev == os.fstat(probe_read).st_dev
    finally:
        os.close(probe_read)
        os.close(probe_write)
