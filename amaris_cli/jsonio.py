"""Durable file primitives: atomic whole-file writes and append-only JSONL journals.

Whole files are written to a temporary sibling, fsynced and renamed over the target, so a
reader sees the old file or the new one, never half of one. JSONL journals are appended one
finished record per line; a line torn by a crash (no trailing newline, or not valid JSON at the
end of the file) is cut off when the journal is reopened, so resuming never duplicates or loses
a finished record.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from amaris_cli.errors import AmarisError

DUMP_OPTS = orjson.OPT_SORT_KEYS


def dumps_line(obj: Any) -> bytes:
    return orjson.dumps(obj, option=DUMP_OPTS) + b"\n"


def dumps_pretty(obj: Any) -> bytes:
    return orjson.dumps(obj, option=DUMP_OPTS | orjson.OPT_INDENT_2) + b"\n"


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    # A process killed mid-write leaves its temporary file; one writer per run makes any other
    # temporary sibling of this target stale.
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        stale.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, dumps_pretty(obj))


def write_jsonl_atomic(path: Path, rows: Iterable[Any]) -> None:
    write_bytes_atomic(path, b"".join(dumps_line(r) for r in rows))


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def repair_torn_tail(path: Path) -> int:
    """Cut a partial last line left by a crash. Returns the number of bytes removed."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    if not data:
        return 0
    keep = len(data)
    if not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
    else:
        last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
        try:
            orjson.loads(data[last_start:])
        except orjson.JSONDecodeError:
            keep = last_start
    if keep == len(data):
        return 0
    with open(path, "r+b") as fh:
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
    return len(data) - keep


def iter_jsonl(path: Path) -> Iterator[Any]:
    """Rows of a JSONL file written by amaris, streamed. A torn last line (a writer killed mid-line,
    or one still appending) is not a record yet and is skipped, so readers work beside writers and
    after crashes; a bad line anywhere else is corruption and names the file and line."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        number = 0
        pending: tuple[int, bytes] | None = None
        for raw in fh:
            number += 1
            if pending is not None:
                yield _parse_line(path, *pending)
                pending = None
            if raw.strip():
                pending = (number, raw)
        if pending is not None and pending[1].endswith(b"\n"):
            try:
                row = orjson.loads(pending[1])
            except orjson.JSONDecodeError:
                return  # the last line, torn
            yield row


def _parse_line(path: Path, number: int, raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise AmarisError(f"{path}:{number}: corrupt line ({exc}); was the file edited by hand?") from None


class JsonlAppender:
    """Append-only journal: one finished record per line, flushed as it is written."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(path)
        self.path = path
        self._fsync = fsync
        self._fh = open(path, "ab")

    def append(self, obj: Any) -> None:
        self._fh.write(dumps_line(obj))
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
