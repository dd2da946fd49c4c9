"""Durable file primitives: atomic whole-file writes, and reading amaris's JSON and JSONL back.

Whole files are written to a temporary sibling, fsynced and renamed over the target, so a reader
sees the old file or the new one, never half of one, and a failed write (a full disk) leaves the
old one. Appended logs (calls.jsonl) may end in a line still being written, or torn by a crash:
readers skip such a last line.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from amaris_cli.errors import AmarisError
from amaris_cli.jsonlimits import json_error_reason, whole_file_problem

DUMP_OPTS = orjson.OPT_SORT_KEYS
M = TypeVar("M", bound=BaseModel)


def dumps_line(obj: Any) -> bytes:
    return orjson.dumps(obj, option=DUMP_OPTS) + b"\n"


def dumps_pretty(obj: Any) -> bytes:
    return orjson.dumps(obj, option=DUMP_OPTS | orjson.OPT_INDENT_2) + b"\n"


STALE_TMP_S = 600.0  # a write takes seconds: a temporary file older than this is a killed writer's


def write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")  # each writer's own
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # disk full, read-only: the target keeps its old bytes, no half file is left
        with contextlib.suppress(OSError):  # on a read-only file system even unlinking nothing fails (EROFS)
            tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    _fsync_dir(path.parent)
    _remove_stale_siblings(path)


def _remove_stale_siblings(path: Path) -> None:
    """A process killed mid-write leaves its temporary file: removed by the next write. Not another writer's in use
    (two `report`s of a run, the scorers of two processes; two threads of one process shared one name): removed
    under it, its rename failed and its command with it. One whose process lives is left until it is old."""
    cutoff = time.time() - STALE_TMP_S
    for stale in path.parent.glob(f".{path.name}.tmp-*"):
        with contextlib.suppress(OSError):
            if _writer_gone(stale) or stale.lstat().st_mtime < cutoff:
                stale.unlink()


def _writer_gone(tmp: Path) -> bool:
    """Whether the process named in a temporary file's name (`.NAME.tmp-PID-THREAD`) has ended, on this host."""
    try:
        pid = int(tmp.name.rsplit(".tmp-", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return True  # not a name amaris gives
    if pid == os.getpid():
        return False  # another thread's write in progress
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it lives, as another user
        return False
    return False


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


def validation_problems(exc: ValidationError, limit: int = 3) -> str:
    """A pydantic error in one line: the first `limit` fields and what is wrong with each."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(record)'}: {e['msg']}" for e in exc.errors()[:limit])


def read_model(path: Path, model: type[M], what: str | None = None) -> M:
    """A JSON file written by amaris, validated: a file that is not JSON, or JSON that is not a `model` (a hand
    edit, a file of another version), is an error naming the file, the line or the field, and the reason."""
    raw = path.read_bytes()
    what = what or f"a valid {model.__name__}"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        where = f"{path}:{exc.lineno}" if raw.strip() else str(path)
        reason = "empty file" if not raw.strip() else _decode_problem(raw, exc, first=True)
        raise AmarisError(f"{where}: not {what}: {reason}; was the file edited by hand?") from None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise AmarisError(f"{path}: not {what} ({validation_problems(exc)}); was the file edited by hand?") from None


def iter_jsonl(path: Path) -> Iterator[Any]:
    """Rows of a JSONL file written by amaris, streamed. A torn last line (a writer killed mid-line,
    or one still appending) is not a record yet and is skipped, so readers work beside writers and
    after crashes; a bad line anywhere else is corruption and names the file and line."""
    return (row for _, row in iter_jsonl_numbered(path))


def iter_models_numbered(path: Path, model: type[M]) -> Iterator[tuple[int, M]]:
    """(line number, record) of a JSONL file written by amaris, validated: a row that is JSON but not a record (a
    hand edit, a file of another version) is an error naming the file, the line and the field, like a line that
    is not JSON."""
    for number, row in iter_jsonl_numbered(path):
        yield number, _validated(path, number, row, model)


def _validated(path: Path, number: int, row: Any, model: type[M]) -> M:
    try:
        return model.model_validate(row)
    except ValidationError as exc:
        raise AmarisError(f"{path}:{number}: not a valid {model.__name__} ({validation_problems(exc)}); "
                          "was the file edited by hand?") from None


class _RecentReads:
    """The records of the per-rollout files this process read last, by their bytes. An evolution reads a step's
    scores four times and its analyses three (each stage is a command of its own too, and reads what it needs);
    validating 2,000 records costs 10-20 ms each time. Only frozen records are shared among readers (none can
    change them); a file whose bytes changed is read again. Bounded, for `amaris serve` and its evolution worker,
    which read many steps: records take 4-9 times their file's bytes (a step of 2,000 rollouts fits whole)."""

    MAX_FILES = 4
    MAX_BYTES = 8 << 20

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: OrderedDict[tuple[str, type], tuple[bytes, int, list[Any]]] = OrderedDict()

    def get(self, path: Path, model: type, digest: bytes) -> list[Any] | None:
        with self._lock:
            held = self._held.get((str(path), model))
            if held is None or held[0] != digest:
                return None
            self._held.move_to_end((str(path), model))
            return list(held[2])

    def put(self, path: Path, model: type, digest: bytes, size: int, records: list[Any]) -> None:
        with self._lock:
            self._held.pop((str(path), model), None)
            if size > self.MAX_BYTES:
                return
            self._held[(str(path), model)] = (digest, size, list(records))
            while len(self._held) > self.MAX_FILES or sum(h[1] for h in self._held.values()) > self.MAX_BYTES:
                self._held.popitem(last=False)


_RECENT = _RecentReads()


def load_per_rollout(path: Path, model: type[M], rollout_id: Callable[[M], str]) -> list[M]:
    """The records of a file that holds one per rollout (rollouts, scores, analyses). A rollout's record twice (a
    hand edit, two files joined) is an error naming both lines: each reader took one of them, and the memory
    refused the step as a whole (its ids must be unique)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    shared = bool(model.model_config.get("frozen"))
    digest = hashlib.sha256(data).digest() if shared else b""
    if shared and (held := _RECENT.get(path, model, digest)) is not None:
        return held
    records: list[M] = []
    first: dict[str, int] = {}
    for number, row in _numbered_rows(path, io.BytesIO(data)):
        record = _validated(path, number, row, model)
        key = rollout_id(record)
        if key in first:
            raise AmarisError(f"{path}:{number}: a second record of rollout {key!r} (the first is on line "
                              f"{first[key]}); was the file edited by hand?")
        first[key] = number
        records.append(record)
    if shared:
        _RECENT.put(path, model, digest, len(data), records)
    return records


def iter_jsonl_numbered(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, row) of iter_jsonl's rows."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        yield from _numbered_rows(path, fh)


def _numbered_rows(path: Path, lines: Iterable[bytes]) -> Iterator[tuple[int, Any]]:
    number = 0
    pending: tuple[int, bytes] | None = None
    for raw in lines:
        number += 1
        if pending is not None:
            yield pending[0], _parse_line(path, *pending)
            pending = None
        if raw.strip():
            pending = (number, raw)
    if pending is not None and pending[1].endswith(b"\n"):
        try:
            row = orjson.loads(pending[1])
        except orjson.JSONDecodeError:
            return  # the last line, torn
        yield pending[0], row


def _parse_line(path: Path, number: int, raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise AmarisError(f"{path}:{number}: corrupt line ({_decode_problem(raw, exc, first=number == 1)}); "
                          "was the file edited by hand?") from None


def _decode_problem(raw: bytes, exc: orjson.JSONDecodeError, first: bool) -> str:
    """Why bytes amaris wrote no longer parse, in words (an editor's re-save, a UTF-16 copy, a torn write)."""
    if first and raw.startswith(b"\xef\xbb\xbf"):
        return "the file starts with a UTF-8 byte-order mark, which amaris never writes (re-saved by an editor?)"
    return (whole_file_problem(raw) if first else None) or json_error_reason(raw, exc)


def append_whole(fd: int, data: bytes, end: int, path: Path) -> None:
    """Write all of `data` at the end, or nothing: a short write (a full disk) is cut back to `end`,
    so the log never keeps half a line."""
    view, done = memoryview(data), 0
    try:
        while done < len(data):
            written = os.write(fd, view[done:])
            if written == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += written
    except OSError as exc:
        if done:
            os.ftruncate(fd, end)
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def append_line(fd: int, obj: Any, path: Path) -> None:
    """One JSON line at the end of the file `fd` (opened O_APPEND), whole or not at all (append_whole)."""
    append_whole(fd, dumps_line(obj), os.lseek(fd, 0, os.SEEK_END), path)
