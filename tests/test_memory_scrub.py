"""The HNSW index files hold no process memory at rest (amaris_cli/memory/scrub.py): ChromaDB's hnswlib
writes the room of elements it has not added yet as uninitialized memory, which once held the judge's API
key (test_reliability's planted-key test found it in data_level0.bin)."""

from __future__ import annotations

import struct
from pathlib import Path

from amaris_cli.memory.scrub import scrub_hnsw
from tests.conftest import EXAMPLES, invoke, judge_env, new_run

GARBAGE = b"Authorization: Bearer sk-not-a-real-key "


def _segments(run: Path) -> list[tuple[Path, int, int, int]]:
    """(segment directory, capacity, elements, bytes per element) of each HNSW index of the store."""
    found = []
    for header in (run / "memory").glob("*/header.bin"):
        _, _, capacity, count, size = struct.unpack_from("<iQQQQ", header.read_bytes())
        found.append((header.parent, capacity, count, size))
    return found


def _fill_unused_room(run: Path) -> int:
    """Write process-memory-like bytes where the indexes have room but no element, as hnswlib may."""
    filled = 0
    for segment, capacity, count, size in _segments(run):
        for name, per_element in (("data_level0.bin", size), ("length.bin", 4)):
            path = segment / name
            data = bytearray(path.read_bytes())
            assert len(data) == capacity * per_element, (path, len(data))
            room = len(data) - count * per_element
            if room > 0:
                data[count * per_element:] = (GARBAGE * (room // len(GARBAGE) + 1))[:room]
                path.write_bytes(bytes(data))
                filled += 1
    return filled


def _unused_room_is_zero(run: Path) -> bool:
    for segment, _capacity, count, size in _segments(run):
        for name, per_element in (("data_level0.bin", size), ("length.bin", 4)):
            if (segment / name).read_bytes()[count * per_element:].strip(b"\0"):
                return False
    return True


def test_a_writer_leaves_no_bytes_in_the_unused_room_of_the_index_and_search_still_works(tmp_path, sim) -> None:
    run = new_run(tmp_path)
    env = judge_env(sim)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", "--quiet", env=env).exit_code == 0
    assert _segments(run) and _unused_room_is_zero(run)
    before = invoke("memory", "search", "--run", run, "grader", "--json", env=env)
    assert before.exit_code == 0, before.stderr
    assert _fill_unused_room(run) > 0  # what a writer's heap could leave there
    assert not _unused_room_is_zero(run)
    rebuilt = invoke("memory", "rebuild", "--run", run, env=env)  # a writer opens and closes the store
    assert rebuilt.exit_code == 0, rebuilt.stderr
    assert _unused_room_is_zero(run)
    assert not any(GARBAGE in p.read_bytes() for p in (run / "memory").rglob("*") if p.is_file())
    after = invoke("memory", "search", "--run", run, "grader", "--json", env=env)
    assert after.exit_code == 0 and after.stdout == before.stdout


def test_a_file_of_another_layout_is_left_alone(tmp_path: Path) -> None:
    segment = tmp_path / "memory" / "segment"
    segment.mkdir(parents=True)
    (segment / "header.bin").write_bytes(struct.pack("<iQQQQ", 1, 0, 100, 2, 16))
    data = GARBAGE * 10  # not 100 x 16 bytes: not the layout scrub reads
    (segment / "data_level0.bin").write_bytes(data)
    (segment / "length.bin").write_bytes(b"\1" * 400)
    assert scrub_hnsw(tmp_path / "memory") == 1  # length.bin has the layout: its 98 unused entries are zeroed
    assert (segment / "data_level0.bin").read_bytes() == data
    assert (segment / "length.bin").read_bytes() == b"\1" * 8 + bytes(392)


def test_a_resumed_command_with_nothing_left_to_index_scrubs_what_a_killed_writer_left(tmp_path, sim) -> None:
    """A writer killed (SIGKILL, SIGTERM) after its last write to the store and before its close never scrubbed. The
    same command run again finds every step indexed and never opens the store's client: it must scrub all the same
    (an uninterrupted run leaves the room zeroed; the resumed one kept the killed process's memory)."""
    run = new_run(tmp_path)
    env = judge_env(sim)
    assert invoke("score", EXAMPLES / "math" / "step-000.jsonl", "--run", run, "--step", 0, "--quiet", env=env).exit_code == 0
    assert invoke("evolve", "--run", run, "--step", 0, "--quiet", env=env).exit_code == 0
    assert _segments(run) and _unused_room_is_zero(run)
    assert _fill_unused_room(run) > 0  # as the killed writer's heap left it
    again = invoke("evolve", "--run", run, "--step", 0, "--quiet", env=env)  # re-run the same command: nothing to do
    assert again.exit_code == 0, again.stderr
    assert _unused_room_is_zero(run)
