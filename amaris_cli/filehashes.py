"""The SHA-256 of a run's files, remembered between commands while each file's status is the same.

A reader tells a stale step file by hashing it (artifacts.freshness), so every `inspect`, `report` and `compare`
hashed every file of every step: 1.5 s of a 2.7 s `inspect` at 240 instances. A hash is remembered with the file's
device, inode, size, mtime and ctime, and used again only while all five are the same. Writing a file sets its
ctime to the time of the write, and nothing sets a ctime back (utime sets it too), so an unchanged status is an
unchanged content, with two provisos kept here:

- a file written again within the same tick of the file system's clock as the status hashed would keep it: a hash
  is remembered only when the file's ctime was older than RACY_NS when the hashing began (git's "racy" entries);
- a file written while it is read: a hash is remembered only when its status before and after the read agree;
- a file system whose ctime is not the kernel's time of the last change: sshfs and other FUSE mounts report the
  mtime as the ctime (utime sets both back: `touch -d` or `cp -p` after an edit of the same size left an edited
  scores file shown current), and an NFS client answers a stat from attributes it cached up to a minute ago. On
  Linux the memo is used only on a run whose mount (/proc/self/mountinfo) is of a LOCAL_FILE_SYSTEMS type.

A clock stepped back by more than RACY_NS between two writes of a file is the case this cannot tell.

The memo is a file per run directory in the memo directory (plainids.memo_directory: $AMARIS_CACHE_DIR, empty for
none), read and written only as a file of this user's that no one else may write (plainids.open_own), and written
once, at the end of the process, when it learned a hash. It only saves time: a memo that cannot be read or written
leaves every file to be hashed.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import threading
import time
from pathlib import Path

import orjson

from amaris_cli.plainids import memo_directory, open_own, prune_memos

RACY_NS = 2_000_000_000  # well above any file system's timestamp tick (ext4: a jiffy; FAT: 2 s)
KEPT_RUNS = 64  # memos of other runs kept beside one being written, the newest first
Status = tuple[int, int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns
MOUNTINFO = "/proc/self/mountinfo"
# File systems that set a file's ctime to the time of every change, utime's included, and answer a stat from the file.
LOCAL_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "zfs", "f2fs", "bcachefs",
                                "overlay", "jfs", "nilfs2", "reiserfs"})


def _local(path: Path) -> bool:
    """Whether `path` is on a LOCAL_FILE_SYSTEMS mount: the mount point that is its longest prefix, the last of those
    mounted there. True where there is no MOUNTINFO (not Linux)."""
    try:
        with open(MOUNTINFO, "rb") as fh:
            lines = fh.read().decode("utf-8", "surrogateescape").splitlines()
    except OSError:
        return True
    parts = path.parts
    best, kind = -1, None
    for line in lines:
        fields, _, rest = line.partition(" - ")
        if len(fields := fields.split()) < 5 or not rest:
            continue
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])).parts
        if len(point) >= best and parts[:len(point)] == point:
            best, kind = len(point), rest.split()[0]
    return kind in LOCAL_FILE_SYSTEMS


def file_status(path: Path) -> Status | None:
    """What tells a file's content changed without reading it (the rule above); None: no such file."""
    try:
        stat = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


def file_sha256(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return hashlib.sha256(data).hexdigest()


class RunHashes:
    """The memo of one run directory: {path relative to it: (status, sha256)}."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.real = str(root.resolve())  # what the memo file is named by and holds
        self.prefix = os.path.join(root, "")  # the run's files are named below it: their memo keys leave it out
        self.file: Path | None = None
        self.local = _local(Path(self.real))  # elsewhere a status may stay the same over an edit: nothing is remembered
        directory = memo_directory()
        if directory is not None and self.local:
            name = hashlib.sha256(os.fsencode(self.real)).hexdigest()[:24]
            self.file = directory / f"file-hashes-{name}.json"
        self.known: dict[str, tuple[Status, str]] = self._read()
        self.learned = False

    def _read(self) -> dict[str, tuple[Status, str]]:
        try:
            if self.file is None or (fd := open_own(self.file, os.O_RDONLY)) is None:
                return {}
            with os.fdopen(fd, "rb") as fh:
                data = orjson.loads(fh.read())
            if data.get("run") != self.real:
                return {}
            return {key: (tuple(entry[:5]), entry[5]) for key, entry in data["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
            return {}  # unreadable or not a memo: nothing is known

    def sha256(self, path: Path) -> str | None:
        """The file's SHA-256 (None: no such file), from the memo while its status is the one hashed."""
        started = time.time_ns()
        name = os.fspath(path)
        key = name[len(self.prefix):] if name.startswith(self.prefix) else name
        if (before := file_status(path)) is None:
            return None
        known = self.known.get(key)
        if known is not None and known[0] == before:
            return known[1]
        sha = file_sha256(path)
        # Remembered only when not changed while read, and too old to be changed again within its ctime's tick.
        if sha is not None and self.local and file_status(path) == before and max(before[3], before[4]) <= started - RACY_NS:
            self.known[key] = (before, sha)
            self.learned = True
        return sha

    def save(self) -> None:
        if not self.learned or self.file is None:
            return
        data = orjson.dumps({"run": self.real,
                             "files": {key: [*status, sha] for key, (status, sha) in list(self.known.items())}})
        tmp = self.file.with_name(f".{self.file.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            new = not self.file.exists()
            os.replace(tmp, self.file)  # another process's memo of the run is replaced: it only saves time
            if new:
                _prune(self.file)
        except OSError:
            tmp.unlink(missing_ok=True)
        self.learned = False


def _prune(new: Path) -> None:
    """At a run's first memo, the memos of other runs (this user's own) but the newest KEPT_RUNS are removed."""
    prune_memos(new, "file-hashes-*.json", KEPT_RUNS)


_runs: dict[Path, RunHashes] = {}
_lock = threading.Lock()


def run_hashes(root: Path) -> RunHashes:
    """This process's memo of the run at `root`, saved when the process exits."""
    with _lock:
        if root not in _runs:
            if not _runs:
                atexit.register(save_all)
            _runs[root] = RunHashes(root)
        return _runs[root]


def save_all() -> None:
    with _lock:
        for memo in _runs.values():
            memo.save()
