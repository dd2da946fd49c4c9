"""Criterion ids that passed the id rule's instruction checks, remembered between processes.

Every command checks the ids of every rubric and config it reads (criteria.criterion_id_problem), and the
checks' regular expressions take about 150 ms to compile: more than anything else a `score` does before its
first request but importing the SDK. The ids of a run are the same from step to step, so a command that finds
them here never compiles the checks.

The memo is a file per version of the rules: its name holds a digest of the modules that define them, Python's
version and its Unicode data, so a changed rule starts an empty memo and never trusts an earlier verdict (and
removes the memos of older versions but the newest few). Only
ids that passed are written, one per line beside its own digest: a line cut short by a writer in another
process (a prefix of an id is another id, which may not pass) is not read. The directory is
$AMARIS_CACHE_DIR (empty: no memo), else $XDG_CACHE_HOME/amaris or ~/.cache/amaris. The memo only saves time:
a directory that cannot be made or written leaves every check to run. A memo is read and written only as a file of
this user's that no one else may write, never through a symlink (`open_own`): in a shared directory another user's
file, or a link to one of this user's files, would have let any id pass or had ids appended to that file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from stat import S_ISREG

MAX_BYTES = 1 << 20  # about 12,000 ids; past it nothing is added
KEPT_VERSIONS = 4  # memos of other versions of the rules kept beside a new one (several installs in use), newest first


def memo_directory() -> Path | None:
    value = os.environ.get("AMARIS_CACHE_DIR")
    if value is not None:
        return Path(value).expanduser() if value else None
    base = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(base):
        return Path(base) / "amaris"
    try:
        return Path.home() / ".cache" / "amaris"
    except RuntimeError:  # no HOME and no password entry: no memo
        return None


def _line(criterion_id: str) -> str:
    return f"{criterion_id} {hashlib.sha256(criterion_id.encode()).hexdigest()[:16]}\n"


class PlainIds:
    """The memo of one version of the rules (`rules`: a digest of them; None: no memo)."""

    def __init__(self, rules: str | None) -> None:
        self.rules = rules
        self._known: set[str] | None = None

    def _path(self) -> Path | None:
        directory = memo_directory()
        return None if directory is None or self.rules is None else directory / f"plain-ids-{self.rules[:20]}.txt"

    def known(self, criterion_id: str) -> bool:
        if self._known is None:
            self._known = set()
            try:
                if (path := self._path()) is not None and (fd := open_own(path, os.O_RDONLY)) is not None:
                    with os.fdopen(fd, "rb") as file:
                        data = file.read(MAX_BYTES)
                    lines = data.decode("ascii", "replace").splitlines(keepends=True)
                    self._known = {line.split(" ", 1)[0] for line in lines if line == _line(line.split(" ", 1)[0])}
            except OSError:
                pass
        return criterion_id in self._known

    def remember(self, criterion_id: str) -> None:
        """Adds an id that passed (a plain slug: ASCII, no spaces). One short append: lines of writers in other
        processes do not interleave with it."""
        if self._known is not None:
            self._known.add(criterion_id)
        try:
            if (path := self._path()) is None:
                return
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if (fd := open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)) is None:
                return
            try:
                if (size := os.fstat(fd).st_size) < MAX_BYTES:
                    os.write(fd, _line(criterion_id).encode("ascii"))
            finally:
                os.close(fd)
            if size == 0:
                _prune(path)
        except OSError:
            pass


def _prune(new: Path) -> None:
    """At a new version's first id, the memos of older versions but the newest few (this user's own) are removed:
    every upgrade, and every edit of the rules in a checkout, made another file, and none was ever removed."""
    prune_memos(new, "plain-ids-*.txt", KEPT_VERSIONS)


def prune_memos(new: Path, pattern: str, keep: int) -> None:
    """The memos `pattern` names beside `new` (regular files of this user's), but `new` and the newest `keep`,
    removed."""
    others = []
    for path in new.parent.glob(pattern):
        try:
            stat = path.lstat()
        except OSError:
            continue
        if path != new and S_ISREG(stat.st_mode) and mine(stat):
            others.append((stat.st_mtime, path))
    for _, path in sorted(others, reverse=True)[keep:]:
        path.unlink(missing_ok=True)


def open_own(path: Path, flags: int) -> int | None:
    """`path` opened, or None unless it is a regular file of this user's that no one else may write. No symlink is
    followed, nor a FIFO waited on (O_NONBLOCK)."""
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o600)
    try:
        stat = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if S_ISREG(stat.st_mode) and not stat.st_mode & 0o022 and mine(stat):
        return fd
    os.close(fd)
    return None


def mine(stat: os.stat_result) -> bool:
    return stat.st_uid == getattr(os, "geteuid", lambda: 0)()  # (no owners where there is no geteuid)
