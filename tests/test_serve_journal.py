"""The serve journal's appends: whole lines or nothing, and a failure names the journal."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from amaris_cli.serve.journal import CompleteEntry, Journal, OpenEntry, read_journal


def test_a_full_disk_names_the_journal() -> None:
    if not os.access("/dev/full", os.W_OK):
        pytest.skip("/dev/full is not writable here (it answers every write with ENOSPC)")
    journal = Journal(Path("/dev/full"))
    with pytest.raises(OSError) as info:
        journal.append(CompleteEntry())
    assert info.value.errno == errno.ENOSPC and info.value.filename == "/dev/full"


def test_appends_read_back_and_a_torn_last_line_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "step-000000.jsonl"
    journal = Journal(path)
    journal.append(OpenEntry(step=0, mode="async", lag=1, limit=0))
    journal.append(CompleteEntry())
    journal.close()
    whole = path.read_bytes()
    assert whole.count(b"\n") == 2
    path.write_bytes(whole + b'{"kind": "sco')  # a process killed mid-line
    state = read_journal(path)
    assert state.header.step == 0 and state.complete
    assert path.read_bytes() == whole
