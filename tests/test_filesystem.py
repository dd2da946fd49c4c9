"""A hostile environment: a full disk, a read-only or unwritable run directory, torn logs.

Every file-system error is one line naming the path and what the errno means (exit 1), never a
traceback; what was already written stays whole, and a re-run once the disk has room finishes with
exactly what an undisturbed run writes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env, read_only_copy, snapshot, write_jsonl


def new_run(tmp_path: Path, name: str = "run") -> Path:
    config = tmp_path / f"{name}.toml"
    config.write_text(TEST_CONFIG)
    run = tmp_path / name
    assert invoke("init", run, "--config", config).exit_code == 0
    return run


def outputs(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for sub in ("steps", "rubrics") for p in sorted((run / sub).rglob("*"))
            if p.is_file()}


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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))} | judge_env(sim)
    base = tmp_path / "shared"
    base.mkdir()
    run = new_run(base)
    for path in [tmp_path, base, *base.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o005 if path.is_dir() else path.stat().st_mode | 0o004)
    rollouts = base / "r.jsonl"
    rollouts.write_text('{"id": "a", "input": "2+2?", "output": "4", "answer": "4"}\n')
    before = snapshot(run)
    result = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                             "amaris_cli", "score", str(rollouts), "--run", str(run), "--step", "0"],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Permission denied" in result.stderr and str(run) in result.stderr
    assert snapshot(run) == before


@pytest.fixture
def small_disk(tmp_path: Path):
    """A tmpfs of a given size at tmp_path/disk (root only), resizable while mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted: list[bool] = []

    def make(size_kb: int) -> Path:
        options = f"size={size_kb}k"
        if mounted:
            command = ["mount", "-o", f"remount,{options}", str(mount)]
        else:
            command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(True)
        return mount

    yield make
    if mounted:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("size_kb", [360, 720, 1080])
def test_a_full_disk_is_one_line_and_a_rerun_with_room_equals_an_undisturbed_run(tmp_path, sim, small_disk, size_kb,
                                                                                 request) -> None:
    env = judge_env(sim)
    reference = request.getfixturevalue("full_disk_reference")
    disk = small_disk(size_kb)
    run = new_run(disk)
    result = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=env)
    if result.exit_code == 0:
        pytest.skip(f"{size_kb} kB was enough for the whole loop (the other sizes fill the disk)")
    assert "Traceback" not in result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and ("No space left on device" in error[0] or "disk is full" in error[0]), result.stderr
    assert str(disk) in error[0]
    small_disk(64 * 1024)
    again = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=env)
    assert again.exit_code == 0, again.stderr
    got = outputs(run)
    assert got.keys() == reference.keys()
    for name, data in reference.items():
        assert got[name] == data, name


@pytest.fixture
def full_disk_reference(tmp_path_factory, sim) -> dict[str, bytes]:
    run = new_run(tmp_path_factory.mktemp("reference"))
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:1", env=judge_env(sim)).exit_code == 0
    return outputs(run)


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
