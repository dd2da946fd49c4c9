"""A hostile environment: a full disk, a read-only or unwritable run directory, torn logs.

Every file-system error is one line naming the path and what the errno means (exit 1), never a
traceback; what was already written stays whole, and a re-run once the disk has room finishes with
exactly what an undisturbed run writes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amaris_cli import jsonio
from amaris_cli.llm import calllog
from amaris_cli.memory.store import MemoryStore
from amaris_cli.simjudge.server import SimJudge
from tests.conftest import (
    EXAMPLES,
    FAST_MEMORY,
    clean_env,
    invoke,
    judge_env,
    new_run,
    outputs,
    read_only_copy,
    snapshot,
    write_jsonl,
)


def one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_writers_on_a_read_only_run_say_so_in_one_line_and_change_nothing(tmp_path, sim) -> None:
    env = judge_env(sim)
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=env).exit_code == 0
    rollouts = write_jsonl(tmp_path / "r.jsonl", [{"id": "a", "input": "2+2?", "output": "4", "answer": "4"}])
    with read_only_copy(run, tmp_path / "ro") as copy:
        before = snapshot(copy)
        for args in (("score", rollouts, "--run", copy, "--step", "1"), ("evolve", "--run", copy, "--step", "0", "--force"),
                     ("loop", EXAMPLES / "math", "--run", copy, "--steps", "1:1"), ("memory", "rebuild", "--run", copy),
                     ("analyze", "--run", copy, "--step", "0", "--force"), ("init", copy / "sub", "--anchor", "The answer is correct.")):
            result = invoke(*args, env=env)
            one_line_error(result, str(copy), "Read-only file system")
        assert snapshot(copy) == before


def test_an_unwritable_run_directory_is_one_line_for_a_user_without_permission(tmp_path, sim) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to run the command as another user (root itself ignores file modes)")
    env = clean_env(**judge_env(sim))
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    probe = subprocess.run([*as_nobody, "-c", "import amaris_cli.cli"], env=env, capture_output=True, text=True,
                           timeout=60, cwd="/")
    if probe.returncode != 0:  # a checkout in a private home (mode 0700): user nobody cannot reach the package
        pytest.skip("user nobody cannot import amaris_cli from this checkout or its virtual environment (is it "
                    f"under a directory others cannot traverse, such as a private home?): {probe.stderr.strip()[-200:]}")
    base = tmp_path / "shared"
    base.mkdir()
    run = new_run(base)
    for path in [tmp_path, base, *base.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o005 if path.is_dir() else path.stat().st_mode | 0o004)
    rollouts = base / "r.jsonl"
    rollouts.write_text('{"id": "a", "input": "2+2?", "output": "4", "answer": "4"}\n')
    before = snapshot(run)
    result = subprocess.run([*as_nobody, "-m", "amaris_cli", "score", str(rollouts), "--run", str(run), "--step", "0"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Permission denied" in result.stderr and str(run) in result.stderr
    assert snapshot(run) == before


class SmallDisk:
    """A tmpfs at `mount` (root only) that a filler file can fill to the last byte, at the start of a
    command or at a chosen point inside it, and that `room` empties again."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.filler = mount / "filler"

    def free(self) -> int:
        st = os.statvfs(self.mount)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Write the filler until the disk refuses, then give `leave` bytes (whole pages) back."""
        chunk = b"\0" * (1 << 16)
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for _ in range(1 << 16):  # bounded: 4 GiB
                try:
                    if os.write(fd, chunk) == 0:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
            os.ftruncate(fd, os.fstat(fd).st_size - leave)
        finally:
            os.close(fd)
        assert self.free() == leave, (self.free(), leave)

    def room(self) -> None:
        self.filler.unlink(missing_ok=True)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 64 MB tmpfs at tmp_path/disk. The only skip: a machine where it cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield SmallDisk(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def full_disk_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """What an undisturbed `loop --steps 0:1` writes."""
    with SimJudge() as judge:
        run = new_run(tmp_path_factory.mktemp("reference"))
        result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(judge))
        assert result.exit_code == 0, result.stderr
    return outputs(run)


def _fill_before(patch: pytest.MonkeyPatch, disk: SmallDisk, owner: object, name: str, hits: Callable[..., bool],
                 fired: list[str], leave: int = 0) -> None:
    """Wrap `owner.name` so that the disk is filled (but `leave` bytes) just before the call that `hits`
    picks, and that call then really gets ENOSPC from the kernel (the write itself is not touched).
    `fired` says it happened."""
    original = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not fired and hits(*args, **kwargs):
            disk.fill(leave)
            fired.append(name)
        return original(*args, **kwargs)

    patch.setattr(owner, name, wrapper)


Arm = Callable[[pytest.MonkeyPatch, SmallDisk, Path, list[str]], None]


def _whole_file(relative: str) -> Arm:
    """The disk fills just before the whole-file write of RUN/relative (a temporary sibling renamed over it)."""

    def arm(patch: pytest.MonkeyPatch, disk: SmallDisk, run: Path, fired: list[str]) -> None:
        _fill_before(patch, disk, jsonio, "write_bytes_atomic", lambda path, data: Path(path) == run / relative, fired)

    return arm


def _calls_append(patch: pytest.MonkeyPatch, disk: SmallDisk, run: Path, fired: list[str]) -> None:
    """The disk fills just before an append to calls.jsonl that needs a new page (tmpfs hands out whole
    pages: an append that fits the last one would not fail), the fourth such."""
    crossings: list[int] = []

    def hits(fd: int, data: bytes, end: int, path: Path) -> bool:
        if Path(path) != run / "calls.jsonl" or -(-(end + len(data)) // PAGE) == -(-end // PAGE):
            return False
        crossings.append(end)
        return len(crossings) == 4

    _fill_before(patch, disk, calllog, "append_whole", hits, fired)


def _memory_store(patch: pytest.MonkeyPatch, disk: SmallDisk, run: Path, fired: list[str]) -> None:
    """The disk fills just before the embedded ChromaDB store is first opened, which creates its database
    (step 0's update searches the memory first), leaving room for the small files that record the failed
    evolution but not for the database."""

    def hits(store: MemoryStore) -> bool:
        return store._client is None and store.writer

    _fill_before(patch, disk, MemoryStore, "_store", hits, fired, leave=8 * PAGE)


def _from_the_start(patch: pytest.MonkeyPatch, disk: SmallDisk, run: Path, fired: list[str]) -> None:
    disk.fill()
    fired.append("start")


PAGE = 4096
# Where the disk is full, and the file the error must name (relative to the run).
FULL_AT: dict[str, tuple[Arm, str, str]] = {
    "from-the-start": (_from_the_start, ".locks/step-000000.lock", "No space left on device"),
    "calls-append": (_calls_append, "calls.jsonl", "No space left on device"),
    "scores": (_whole_file("steps/000001/scores.jsonl"), "steps/000001/scores.jsonl", "No space left on device"),
    "provenance": (_whole_file("steps/000000/provenance.json"), "steps/000000/provenance.json",
                   "No space left on device"),
    # ChromaDB's SQLite says SQLITE_FULL in its own words; the error names the store.
    "memory-store": (_memory_store, "memory", "database or disk is full"),
    "memory-marks": (_whole_file("memory/indexed-steps.json"), "memory/indexed-steps.json", "No space left on device"),
}


@pytest.mark.parametrize("where", list(FULL_AT))
def test_a_full_disk_is_one_line_and_a_rerun_with_room_equals_an_undisturbed_run(sim, small_disk, full_disk_reference,
                                                                                 where) -> None:
    """The disk is full at a chosen point of a run; it must fail there (never skip: a case whose point is
    not reached, or that finishes, is a failure), in one line naming the file, and a re-run once there is
    room must write exactly what an undisturbed run writes."""
    arm, named, reason = FULL_AT[where]
    # No embedding cache: the step's indexing takes the model's time, as in a user's run. With its vectors
    # cached, the indexer's write of indexed-steps.json and the next step's first append to calls.jsonl
    # hit the full disk together, and the error is whichever comes first (both name their file).
    env = judge_env(sim, AMARIS_EMBEDDING_CACHE="")
    run = new_run(small_disk.mount)
    fired: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        arm(patch, small_disk, run, fired)
        result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=env)
    assert fired, f"the run never reached the point where the disk was to fill ({where})"
    one_line_error(result, f"{run / named}: ", reason)
    assert not [p for p in run.rglob("*.tmp-*")], "a failed whole-file write leaves no temporary file"
    log = (run / "calls.jsonl").read_bytes()
    assert not log or log.endswith(b"\n"), "the log keeps no half line"

    small_disk.room()
    again = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=env)
    assert again.exit_code == 0, again.stderr
    got = outputs(run)
    assert got.keys() == full_disk_reference.keys()
    for name, data in full_disk_reference.items():
        assert got[name] == data, name


def test_readers_take_a_torn_last_line_of_calls_jsonl_in_their_stride(tmp_path, sim) -> None:
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    with open(run / "calls.jsonl", "ab") as fh:
        fh.write(b'{"ts": "2026-11-23", "agent": "scorer", "usage": {"prompt_tok')
    for args in (("inspect", run, "--json"), ("inspect", run, "--step", "0"), ("compare", run, run),
                 ("report", run, "--out", tmp_path / "r.html"), ("replay", run, "--out", tmp_path / "again", "--offline"),
                 ("rewards", "--run", run, "--step", "0")):
        result = invoke(*args)
        assert result.exit_code == 0, (args[0], result.stderr)
    # a later writer cuts the torn line before appending, so the log stays readable line by line
    assert invoke("summarize", "--run", run, "--step", "0", "--force", env=judge_env(sim)).exit_code == 0
    lines = (run / "calls.jsonl").read_bytes().splitlines()
    assert all(line.startswith(b"{") and line.endswith(b"}") for line in lines)


def test_a_corrupt_line_inside_calls_jsonl_is_named_not_a_traceback(tmp_path, sim) -> None:
    run = new_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    data = (run / "calls.jsonl").read_bytes().splitlines(keepends=True)
    data[3] = b"{not json\n"
    (run / "calls.jsonl").write_bytes(b"".join(data))
    result = invoke("inspect", run)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert f"{run / 'calls.jsonl'}:4: corrupt line" in result.stderr


def test_control_characters_in_input_never_reach_the_terminal_raw(tmp_path, sim_factory) -> None:
    judge = sim_factory(agent_faults={"scorer": "wrong_shape"})
    run = new_run(tmp_path)
    source = write_jsonl(tmp_path / "r.jsonl", [{"id": "evil\x1b[2J\x1b]0;owned\x07\u202eid", "input": "2+2?",
                                                 "output": "4", "answer": "4"}])
    result = invoke("score", source, "--run", run, "--step", "0", env=judge_env(judge))
    assert result.exit_code == 4
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr and "\u202e" not in result.stderr
    assert "evil\\x1b[2J" in result.stderr


def test_json_on_stdout_holds_no_raw_character_that_rewrites_a_terminal(tmp_path, sim) -> None:
    """orjson escapes only the characters below U+0020: a rollout id with a bidi override or a C1 control (CSI
    U+009B starts an escape sequence on many terminals) reached `rewards` and `--json` output raw. They are
    written as \\uXXXX escapes, which every JSON reader reads as the same id."""
    run = new_run(tmp_path)
    rid = "evil\u202edi\u009b2J\x7f"
    source = write_jsonl(tmp_path / "r.jsonl", [{"id": rid, "input": "2+2?", "output": "4", "answer": "4"}])
    scored = invoke("score", source, "--run", run, "--step", "0", "--json", env=judge_env(sim))
    assert scored.exit_code == 0, scored.stderr
    for out in (scored.stdout, invoke("rewards", "--run", run, "--step", "0").stdout,
                invoke("inspect", run, "--step", "0", "--json").stdout):
        assert not any(ch in out for ch in "\u202e\u009b\x7f"), out
    [row] = [json.loads(line) for line in invoke("rewards", "--run", run, "--step", "0").stdout.splitlines()]
    assert row["id"] == rid and "\\u202e" in invoke("rewards", "--run", run, "--step", "0").stdout


def test_emoji_codes_in_input_are_shown_as_written(tmp_path, sim_factory) -> None:
    """rich replaces `:name:` with an emoji in every string it prints, markup or not: a rollout whose text
    holds `1:100:1` or `:white_check_mark:` was shown as `1💯1` or ✅ in failure lines and in `memory search`,
    not as the text the run holds."""
    run = new_run(tmp_path, extra=FAST_MEMORY)
    rid = "r-1:100:1-:white_check_mark:"
    source = write_jsonl(tmp_path / "r.jsonl", [{"id": rid, "input": "2+2?", "output": "4", "answer": "4"}])
    failed = invoke("score", source, "--run", run, "--step", "0", env=judge_env(sim_factory(agent_faults={"scorer": "wrong_shape"})))
    assert failed.exit_code == 4 and f"failed {rid}: " in failed.stderr, failed.stderr
    judge = sim_factory()
    assert invoke("score", source, "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 0
    assert invoke("evolve", "--run", run, "--step", "0", env=judge_env(judge)).exit_code == 0
    found = invoke("memory", "search", "--run", run, "rollout 1:100:1", env=judge_env(judge))
    assert found.exit_code == 0 and "r-1:100:1-:white_check" in found.stderr, found.stderr  # the column wraps
    assert not any(ch in failed.stderr + found.stderr for ch in "\U0001f4af\u2705")


def test_the_arabic_letter_mark_is_shown_as_an_escape_like_the_other_bidi_controls(tmp_path, sim_factory) -> None:
    """U+061C (ARABIC LETTER MARK) is one of Unicode's bidi controls, a twin of U+200F: after it the numbers of
    `r\\u061c 12 34` are displayed as `34 12`. It reached the failure lines and `rewards` raw."""
    rid = "r\u061c 12 34"
    run = new_run(tmp_path)
    source = write_jsonl(tmp_path / "r.jsonl", [{"id": rid, "input": "2+2?", "output": "4", "answer": "4"}])
    failed = invoke("score", source, "--run", run, "--step", "0", env=judge_env(sim_factory(agent_faults={"scorer": "wrong_shape"})))
    assert failed.exit_code == 4 and "failed r\\u061c 12 34: " in failed.stderr, failed.stderr
    assert invoke("score", source, "--run", run, "--step", "0", env=judge_env(sim_factory())).exit_code == 0
    rewards = invoke("rewards", "--run", run, "--step", "0").stdout
    assert "\u061c" not in failed.stderr + rewards and json.loads(rewards)["id"] == rid


def test_two_writers_of_one_file_never_remove_each_others_temporary_file(tmp_path) -> None:
    """A whole-file write removed every temporary sibling of its target as a killed writer's. Two writers of one
    file (two `report`s of a run, the scorers of two processes; two threads shared one name) then removed each
    other's in use, and the rename of the one that lost it failed. A sibling whose process lives is left alone
    (until it is old), a killed writer's removed."""
    import threading
    import time

    target = tmp_path / "judge-scale.json"
    payloads = [json.dumps({"writer": n, "pad": "x" * 200_000}).encode() for n in range(2)]
    failed: list[BaseException] = []

    def write(data: bytes) -> None:
        try:
            for _ in range(40):
                jsonio.write_bytes_atomic(target, data)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            failed.append(exc)

    writers = [threading.Thread(target=write, args=(data,)) for data in payloads]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert not failed and target.read_bytes() in payloads, failed
    # another process's write in progress is left alone, until it is old (a recycled pid)
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        writing = tmp_path / f".{target.name}.tmp-{living.pid}-1"
        writing.write_bytes(b"{")
        jsonio.write_bytes_atomic(target, payloads[0])
        assert writing.exists()
        old = time.time() - jsonio.STALE_TMP_S - 1
        os.utime(writing, (old, old))
        jsonio.write_bytes_atomic(target, payloads[0])
        assert not writing.exists()
    finally:
        living.kill()
        living.wait()
    # a killed writer's is removed by the next write (tests/test_crash_resume.py: a resumed run has no stray file)
    killed = tmp_path / f".{target.name}.tmp-{living.pid}-1"
    killed.write_bytes(b"{")
    jsonio.write_bytes_atomic(target, payloads[1])
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
