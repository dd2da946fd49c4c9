"""The name a run's entries carry in a shared memory (`--memory-url`), kept with the run so that it survives a move.

The key was made from the run's path alone, so a run moved or renamed took its own entries for another job's:
its update saw its recent summaries twice (as static entries, and again as "another job's" dynamic hits), and a
`memory rebuild` left the entries under the old key behind. The first writer of a run into a shared memory keeps
the key in RUN/shared-memory.json, with the identity of the run's directory (device and inode): a directory moved
or renamed within its file system is the same one and keeps the key; a copy (`cp -r` for a sweep) is another
and gets a key of its own, since the two runs part from the copy on (sharing one, each would take the other's
later entries for its own). A run moved across file systems is a copy by that measure. A copy indexes its history
again under its own key (the store keeps its marks per key: `MemoryStore._marks_name`), and dynamic retrieval
leaves out the original's entries that say the same.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel

from amaris_cli.jsonio import read_model, write_json_atomic
from amaris_cli.rundir import RunDir

KEY_FILE = "shared-memory.json"


class RunKey(BaseModel):
    key: str
    path: str  # where the run was when the key was kept (said, not compared)
    device: int  # the run directory's identity: a move within a file system keeps it, a copy has another
    inode: int


def run_keys(run: RunDir, keep: bool = False) -> tuple[str, ...]:
    """The run's key, then the one earlier versions gave a run whose name holds "|" (its entries stay its own).
    The key never holds the "|" that ends it in an entry's key (`MemoryStore.key`): a run named `job|a` read its
    own entries as another job's. `keep` (a writer): the key is kept in KEY_FILE for the run's later processes."""
    here = run.path.resolve()
    digest = hashlib.sha256(str(here).encode()).hexdigest()[:8]
    name = here.name[:40]
    key = f"{name.replace('|', '_')}-{digest}"
    try:
        info = here.stat()
        identity = (info.st_dev, info.st_ino)
    except OSError:
        identity = None  # no run there yet (a reader's question): the key its path gives
    stored = _read(run.path / KEY_FILE) if identity is not None else None
    if stored is not None and (stored.device, stored.inode) == identity:
        key = stored.key  # the same directory, here or moved here
    if keep and identity is not None and (stored is None or (stored.key, stored.path, stored.device, stored.inode)
                                          != (key, str(here), *identity)):
        try:
            write_json_atomic(run.path / KEY_FILE, RunKey(key=key, path=str(here), device=identity[0],
                                                          inode=identity[1]).model_dump())
        except OSError:
            pass  # a run this process cannot write: it keeps the key in this process only
    return (key,) if "|" not in name else (key, f"{name}-{digest}")


def _read(path: Path) -> RunKey | None:
    try:
        return read_model(path, RunKey)
    except FileNotFoundError:
        return None
