"""calls.jsonl: one line per request, and an index of the answers it holds.

The log is what makes cost accounting, debugging and exact replay possible, so a request answered
by a model is recorded in full (messages and response text). It never records a key: only the
endpoint (without credentials) and the model; replies are redacted before they are written. Several processes append to one log at once (`score` of step t+1 beside
`evolve` of step t): each line is written with one `write` under an exclusive `flock` on the log,
and a line torn by a killed writer is cut before the next append.

`.calls-index/step-NNNNNN.jsonl` (and `nostep.jsonl`) index the answered requests of each step:
`{"h": request hash, "o": byte offset, "n": length, "a": accepted}`, where `accepted` says whether
amaris used the answer (false: it was invalid and re-asked). A command working on step t reads only
that step's index to answer unchanged requests from the log, so its start-up does not grow with the
length of the run. The index is derived data: it is rebuilt from the log when missing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from amaris_cli.jsonio import append_whole, dumps_line

INDEX_DIR = ".calls-index"
CUT = "cut"  # CallIndex.find: the log ends before an indexed record's end
Source = Literal["model", "replay", "cache"]


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class CallRecord(BaseModel):
    """One request. `source`: model (sent to the endpoint), replay (answered from another run's log,
    recorded in full so this run replays on its own), cache (answered from an earlier line of this
    log with the same request hash; messages and response are that line's)."""

    model_config = ConfigDict(extra="forbid")
    ts: str
    agent: str
    step: int | None
    context: str = ""
    request_hash: str
    model: str
    base_url: str | None
    messages: list[dict[str, Any]] | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    response: str | None
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None  # "length": cut at the token limit (an invalid answer, also on replay)
    latency_s: float
    attempts: int
    error: str | None = None
    source: Source = "model"


GATE_KEY = "gate:"  # the group key of the adoption gate's calls (gate.py); score_group makes it "group:gate:ITEM"
GATE_CONTEXT = "group:" + GATE_KEY
# serve's /validate: "POST /validate: ROLLOUT_ID" (serve/validation.py), which no trainer's id is likely to begin with
VALIDATION_CONTEXT = "POST /validate: "


def usage_row(agent: str, context: str) -> str:
    """The usage table's row of a call: the adoption gate's calls and the judgements of a trainer's validation
    rollouts are made with the scorer's settings, but counted apart from scoring, so that a step's scorer calls
    are its rollouts' and the gate's and the validation's cost show. Known from the context alone (calls.jsonl
    has nothing else): a scorer call of a user's rollout whose id begins "group:gate:" or "POST /validate: ", or of
    a group whose instance id begins "gate:", would be counted as theirs."""
    if agent != "scorer":
        return agent
    if context.startswith(GATE_CONTEXT):
        return "gate"
    return "validation" if context.startswith(VALIDATION_CONTEXT) else agent


def call_line(*, ts: str, agent: str, step: int | None, context: str, request_hash: str, model: str,
              base_url: str | None, messages: list[dict[str, Any]] | None, params: dict[str, Any],
              response: str | None, usage: Usage, finish_reason: str | None, latency_s: float, attempts: int,
              error: str | None, source: Source) -> bytes:
    """The log line of one request: byte for byte `CallRecord(...).model_dump(mode="json")` as a line,
    without validating a model per call (the client builds every field from typed values; a test holds
    the two equal). Readers validate what they read with CallRecord."""
    return dumps_line({
        "ts": ts, "agent": agent, "step": step, "context": context, "request_hash": request_hash, "model": model,
        "base_url": base_url, "messages": messages, "params": params, "response": response,
        "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
        "finish_reason": finish_reason, "latency_s": latency_s, "attempts": attempts, "error": error, "source": source,
    })


@dataclass(frozen=True)
class Written:
    """Where a record landed in the log: what the index points at."""

    step: int | None
    offset: int
    length: int


def index_name(step: int | None) -> str:
    return "nostep.jsonl" if step is None else f"step-{step:06d}.jsonl"


@contextmanager
def _locked(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _cut_torn_tail(fd: int) -> int:
    """Truncate a partial last line (a writer killed mid-write); returns the end offset."""
    end = os.lseek(fd, 0, os.SEEK_END)
    if end == 0 or os.pread(fd, 1, end - 1) == b"\n":
        return end
    pos = end
    while pos > 0:
        start = max(0, pos - 65536)
        chunk = os.pread(fd, pos - start, start)
        newline = chunk.rfind(b"\n")
        if newline != -1:
            keep = start + newline + 1
            os.ftruncate(fd, keep)
            return keep
        pos = start
    os.ftruncate(fd, 0)
    return 0


def scan_log(path: Path, damaged: list[int] | None = None) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(offset, length, row) of every complete line of a log; the numbers of the complete lines that are not
    JSON are appended to `damaged` when given."""
    offset = 0
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            length = len(raw)
            if raw.endswith(b"\n") and raw.strip():
                try:
                    yield offset, length, orjson.loads(raw)
                except orjson.JSONDecodeError:
                    if damaged is not None:  # a torn line in the middle of a log cannot be an answer
                        damaged.append(number)
            offset += length


def _indexable(row: Any) -> bool:
    """An answered request, or one that failed, of the log's own (a line of source "cache" points at another)."""
    return (isinstance(row, dict) and row.get("source") != "cache"
            and (row.get("response") is not None or bool(row.get("error"))))


def build_index(log: Path, target: Path) -> None:
    """Write the index of an existing log (a run from before the index, or a deleted index)."""
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    lines: dict[str, list[bytes]] = {}
    for offset, length, row in scan_log(log):
        if _indexable(row):
            entry = {"h": row.get("request_hash"), "o": offset, "n": length, "a": None}
            if row.get("response") is None:
                entry["f"] = True
            lines.setdefault(index_name(row.get("step")), []).append(dumps_line(entry))
    for name, rows in lines.items():
        (tmp / name).write_bytes(b"".join(rows))
    try:
        os.rename(tmp, target)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)


TAIL_BYTES = 256 * 1024


def answered_recently(log: Path, base_url: str | None, model: str, within_s: float) -> bool:
    """Whether the last request the end of a log records to the model `model` at `base_url` (as recorded:
    without credentials) was answered, less than `within_s` seconds ago. A failure after the last answer (a
    401 of a revoked key, above all) means no: a command that trusted an older answer would send a full
    round of requests with a rejected key, and so would every command after it."""
    from datetime import UTC, datetime

    try:
        with open(log, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_BYTES)
            fh.seek(start)
            lines = fh.read().split(b"\n")
    except OSError:
        return False
    now = datetime.now(UTC)
    for raw in reversed(lines[1:] if start else lines):  # the first line of a tail may be cut
        try:
            row = orjson.loads(raw)
            if row["source"] != "model" or row["base_url"] != base_url or row["model"] != model:
                continue
            if row["response"] is None:
                return False
            age = (now - datetime.fromisoformat(row["ts"])).total_seconds()
            return 0 <= age < within_s  # a time ahead of the clock is no evidence (a corrupt line, a clock set back)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return False


class CallLog:
    """The writer side: appends records and index entries. `path=None` logs nothing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._fd: int | None = None
        self._index_fds: dict[str, int] = {}
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.index_dir = path.parent / INDEX_DIR
        with _locked(self._fd):
            if not self.index_dir.is_dir():
                if os.fstat(self._fd).st_size:
                    build_index(path, self.index_dir)
                else:
                    self.index_dir.mkdir(exist_ok=True)

    def write(self, record: CallRecord) -> Written | None:
        return self.write_line(record.step, dumps_line(record.model_dump(mode="json")))

    def write_line(self, step: int | None, line: bytes) -> Written | None:
        """Append one complete line (see `call_line`) for `step`; where it landed."""
        if self._fd is None:
            return None
        with _locked(self._fd):
            offset = _cut_torn_tail(self._fd)
            append_whole(self._fd, line, offset, self.path)  # type: ignore[arg-type]
        return Written(step, offset, len(line))

    def index(self, written: Written | None, request_hash: str, accepted: bool, failed: bool = False) -> None:
        """Make an answered request findable by later commands (`accepted`: amaris used the answer), or a
        failed one (`failed`) findable by a replay of this run."""
        if written is None or self._fd is None:
            return
        name = index_name(written.step)
        fd = self._index_fds.get(name)
        if fd is None:
            fd = os.open(self.index_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._index_fds[name] = fd
        entry = dumps_line({"h": request_hash, "o": written.offset, "n": written.length, "a": accepted,
                            **({"f": True} if failed else {})})
        with _locked(self._fd):
            append_whole(fd, entry, os.lseek(fd, 0, os.SEEK_END), self.index_dir / name)

    def close(self) -> None:
        for fd in self._index_fds.values():
            os.close(fd)
        self._index_fds.clear()
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


class CallIndex:
    """The reader side: answers recorded in a log, looked up by step and request hash.
    Works on a read-only run: without an index on disk, the log is scanned once in memory."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._dir = log.parent / INDEX_DIR
        self._steps: dict[str, dict[str, tuple[int, int, bool | None, bool]]] = {}
        self._scanned = False
        self._damaged: dict[tuple[str, str], tuple[int, str]] = {}  # (step, hash): (offset, what is wrong)
        self._unreadable: list[int] = []  # lines a scan (no index on disk) could not read: whose, nobody knows

    def _load(self, step: int | None) -> dict[str, tuple[int, int, bool | None, bool]]:
        name = index_name(step)
        if name in self._steps:
            return self._steps[name]
        if not self._dir.is_dir():
            self._scan_all()
            return self._steps.setdefault(name, {})
        found: dict[str, tuple[int, int, bool | None, bool]] = {}
        try:
            raw = (self._dir / name).read_bytes()
        except FileNotFoundError:
            raw = b""
        for line in raw.split(b"\n"):
            try:
                entry = orjson.loads(line)
                h, value = entry["h"], (entry["o"], entry["n"], entry["a"], bool(entry.get("f")))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # a torn index line: that answer is just not found
            # One request can be answered several times (an identical re-ask, a retry by a re-run): the
            # answer amaris accepted is the one its files were made from, so it wins over an invalid one,
            # and any answer wins over a failure.
            if h not in found or _rank(value) > _rank(found[h]):
                found[h] = value
        self._steps[name] = found
        return found

    def _scan_all(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        if not self.log.exists():
            return
        for offset, length, row in scan_log(self.log, self._unreadable):
            if _indexable(row):
                table = self._steps.setdefault(index_name(row.get("step")), {})
                value = (offset, length, None, row.get("response") is None)
                h = row.get("request_hash")
                if h not in table or _rank(value) > _rank(table[h]):
                    table[h] = value

    def forget(self, step: int | None) -> None:
        """Drop a step's index from memory (a long-lived process done with the step); read again on use. A log
        without an index on disk is scanned once for every step: its tables stay, or the step's answers were lost."""
        if self._scanned:
            return
        name = index_name(step)
        self._steps.pop(name, None)
        self._damaged = {key: value for key, value in self._damaged.items() if key[0] != name}

    def accepted(self, step: int | None, request_hash: str) -> bool | None:
        """Whether amaris used the recorded answer of a request (None: not recorded, or not said)."""
        entry = self._load(step).get(request_hash)
        return None if entry is None else entry[2]

    def find(self, step: int | None, request_hash: str, accepted_only: bool) -> CallRecord | None:
        """The recorded answer of a request (`accepted_only`: one amaris used); without `accepted_only`, a
        recorded failure too (a record with `error` and no `response`), for a replay to repeat."""
        entry = self._load(step).get(request_hash)
        if entry is None:
            return None
        offset, length, accepted, failed = entry
        if accepted_only and (accepted is not True or failed):
            return None
        try:
            with open(self.log, "rb") as fh:
                fh.seek(offset)
                raw = fh.read(length)
            if len(raw) < length:  # the log ends before the record's end: it is not the log indexed
                self._damaged[(index_name(step), request_hash)] = (offset, CUT)
                return None
            record = CallRecord.model_validate(orjson.loads(raw))
        except OSError:
            return None
        except (orjson.JSONDecodeError, ValueError) as exc:  # the answer is there but cannot be read: not found
            what = "not JSON" if isinstance(exc, orjson.JSONDecodeError) else "not a call record"
            self._damaged[(index_name(step), request_hash)] = (offset, f"damaged ({what})")
            return None
        if record.request_hash != request_hash or (record.response is None) != failed or (failed and not record.error):
            self._damaged[(index_name(step), request_hash)] = (offset, "another request's (the log was cut or "
                                                                       "rewritten under its index)")
            return None
        return record

    def damage(self, step: int | None, request_hash: str) -> str | None:
        """Why `find` found no answer where the index has one: the record's line and what is wrong with it."""
        found = self._damaged.get((index_name(step), request_hash))
        if found is None:
            return None
        offset, problem = found
        if problem == CUT:
            return (f"its index points past the end of the log (to a record at byte {offset}), which was cut since "
                    f"(delete {self._dir} to index the log again)")
        newlines, read, last = 0, 0, b""
        try:
            with open(self.log, "rb") as fh:
                while read < offset:  # in pieces: a long run's log holds gigabytes before the record
                    chunk = fh.read(min(1 << 20, offset - read))
                    if not chunk:
                        break
                    newlines += chunk.count(b"\n")
                    read += len(chunk)
                    last = chunk[-1:]
        except OSError:
            return f"its record (at byte {offset}) is {problem}"
        line = newlines + 1
        if read and last != b"\n":  # the index points into a line: the log is not the one indexed
            return (f"its index points into line {line} of the log, which was cut or rewritten since (delete "
                    f"{self._dir} to index the log again)")
        return f"its record, line {line}, is {problem}"

    def unreadable(self) -> str | None:
        """The log's lines that are not JSON, when it was scanned for want of an index (so that nobody knows whose
        record each was), or None."""
        lines = self._unreadable
        if not lines:
            return None
        if len(lines) == 1:
            return f"line {lines[0]} of the log is damaged (not JSON) and may be its record (the log has no index)"
        more = f" and {len(lines) - 3} more" if len(lines) > 3 else ""
        return (f"lines {', '.join(map(str, lines[:3]))}{more} of the log are damaged (not JSON), and one may be its "
                "record (the log has no index)")

    def records(self, step: int | None) -> Iterator[CallRecord]:
        """Every answered record of a step (to explain a replay miss)."""
        for request_hash in list(self._load(step)):
            found = self.find(step, request_hash, accepted_only=False)
            if found is not None and found.response is not None:
                yield found

    def may_hold(self, step: int | None, context: str) -> bool:
        """Whether the log holds a record of `context` at `step`, answered or failed, or may: a record that does
        not read (a damaged line; a log without an index, its unreadable lines) may be one."""
        for request_hash in list(self._load(step)):
            found = self.find(step, request_hash, accepted_only=False)
            if found is None or found.context == context:
                return True
        return bool(self._unreadable)


def _rank(value: tuple[int, int, bool | None, bool]) -> int:
    """Which of two records of one request a lookup takes: an accepted answer, then any answer, then a failure."""
    _, _, accepted, failed = value
    return 0 if failed else (2 if accepted is True else 1)
