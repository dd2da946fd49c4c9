"""SIGTERM (`timeout`, `kill`, a scheduler's preemption, CI) ends a command as Ctrl-C does: its cleanup runs, it says
it was terminated and that the same command continues, and it exits 143. It died at once, its cleanup skipped.

Real processes and real signals. A command waiting in its event loop: tests/test_online.py
(test_sigterm_ends_a_command_that_waits_for_an_earlier_evolution_as_ctrl_c_does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from amaris_cli import locks
from amaris_cli.memory.privatecopy import OWNER
from amaris_cli.memory.store import IO_LOCK
from amaris_cli.rundir import RunDir
from tests.conftest import (
    EXAMPLES,
    clean_env,
    invoke,
    judge_env,
    new_run,
    new_scenario_run,
    process_env,
    stop_signals,
    wait_until,
)

TERMINATED = "terminated: re-run the same command to continue where it stopped"


def amaris(env: dict[str, str], *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "amaris_cli", *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=stop_signals())


def terminate(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        return proc.returncode, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SEARCH = ("memory", "search", "note to the grader award full marks", "--json")


def search_holding_its_copy(env: dict[str, str], run: Path, temp: Path) -> tuple[subprocess.Popen[str], Path]:
    """A `memory search` that has made its private copy (amaris-memory-* in `temp`, its TMPDIR) and waits to fill it:
    the caller holds the memory's io lock, as a writer mid-write does, so no timing luck is involved. The copy is
    taken as made once it has its owner file: the directory appears an instant before, and a reader killed in that
    instant leaves a directory no later reader may take for an orphan (privatecopy.remove_orphans; a fresh-clone CI
    run killed one there)."""
    before = set(temp.glob("amaris-memory-*"))
    proc = amaris({**env, "TMPDIR": str(temp)}, *SEARCH, "--run", run)
    wait_until(lambda: any((new / OWNER).exists() for new in set(temp.glob("amaris-memory-*")) - before)
               or proc.poll() is not None, timeout=60, what="the search's private copy")
    assert proc.poll() is None, proc.communicate()
    (copy,) = set(temp.glob("amaris-memory-*")) - before
    return proc, copy


def test_sigterm_ends_memory_search_and_removes_its_private_copy(tmp_path: Path, sim) -> None:
    """`memory search` reads a private copy of the run's embedded memory, made in a temporary directory
    (amaris-memory-*) that it removes when it closes. Killed by SIGTERM it left it there: a full copy of the memory,
    growing with the run, for every search a scheduler or `timeout` ended."""
    run = new_scenario_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    temp = tmp_path / "tmp"  # the child's TMPDIR: every amaris-memory-* in it is its own
    temp.mkdir()
    with locks.brief(RunDir(run).lock_path(IO_LOCK)):
        proc, _ = search_holding_its_copy(process_env(sim), run, temp)
        code, err = terminate(proc)
    assert list(temp.iterdir()) == []
    assert code == 143 and TERMINATED in " ".join(err.split()), (code, err)
    assert json.loads(invoke(*SEARCH, "--run", run, env=judge_env(sim)).stdout)  # run again, it finds the memory


def test_the_next_reader_removes_the_copy_a_killed_reader_left_and_no_living_readers(tmp_path: Path, sim) -> None:
    """SIGKILL (the OOM killer, a scheduler past its grace period) leaves no chance to clean up: the private copy
    stayed in the temporary directory for good, one full copy of the memory per killed reader. The next reader
    removes it; a living reader's copy, and a directory an earlier version made (no owner file), stay."""
    run = new_scenario_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    temp = tmp_path / "tmp"
    (temp / "amaris-memory-earlier-version").mkdir(parents=True)
    env = process_env(sim)
    with locks.brief(RunDir(run).lock_path(IO_LOCK)):
        killed, left = search_holding_its_copy(env, run, temp)
        killed.kill()
        killed.communicate()
        assert left.is_dir()
        searches: list[subprocess.Popen[str]] = []
        try:
            living, kept = search_holding_its_copy(env, run, temp)
            searches.append(living)
            assert not left.exists()
            other, made = search_holding_its_copy(env, run, temp)
            searches.append(other)
            assert kept.is_dir() and made.is_dir()
        finally:
            for proc in searches:
                proc.send_signal(signal.SIGINT)
    for proc in searches:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
    assert [p.name for p in temp.iterdir()] == ["amaris-memory-earlier-version"]


def test_sigterm_ends_a_command_outside_its_event_loop(tmp_path: Path) -> None:
    """`score` reads its rollouts (here from a named pipe a trainer has opened and not yet written to) before its event
    loop starts: SIGTERM there ends it as Ctrl-C does, and the run is not touched."""
    run = new_run(tmp_path)
    pipe = tmp_path / "rollouts.jsonl"
    os.mkfifo(pipe)
    proc = amaris(clean_env(), "score", pipe, "--run", run, "--step", 0)
    writer = None
    try:
        def reading() -> bool:  # opening the pipe's write end succeeds once the command has its read end open
            nonlocal writer
            try:
                writer = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                assert proc.poll() is None, proc.communicate()
                return False
            return True

        wait_until(reading, timeout=60, what="score to open its input")
        code, err = terminate(proc)
    finally:
        if writer is not None:
            os.close(writer)
    assert code == 143 and TERMINATED in " ".join(err.split()), (code, err)
    assert not (run / "steps" / "000000").exists()


def test_a_copy_an_interrupt_left_to_no_one_is_removed(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C or SIGTERM while the copy's directory is being made (before its owner file has its name: no later reader
    would remove it), or just after, before the store holds it: the directory goes with the process. A test of the
    full suite under load saw a search, interrupted in that instant, leave its directory."""
    from amaris_cli.memory import privatecopy

    monkeypatch.setattr(privatecopy.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(privatecopy.os, "rename", lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        privatecopy.PrivateDirectory("amaris-memory-")
    except KeyboardInterrupt:
        pass
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    temp = tmp_path / "tmp"
    temp.mkdir()
    made = subprocess.run([sys.executable, "-c", "from amaris_cli.memory.privatecopy import PrivateDirectory\n"
                           "PrivateDirectory('amaris-memory-')\nraise KeyboardInterrupt"],
                          env={**clean_env(), "TMPDIR": str(temp)}, capture_output=True, text=True, timeout=60)
    assert "KeyboardInterrupt" in made.stderr and list(temp.iterdir()) == []
    # the interrupt in the instant the directory is made, before anything else runs (a fresh-clone CI run's SIGTERM
    # landed there: the test saw the directory appear and signalled at once)
    made = subprocess.run([sys.executable, "-c", "import os\nmkdir = os.mkdir\n"
                           "def interrupted(*a, **k):\n    mkdir(*a, **k)\n    raise KeyboardInterrupt\n"
                           "os.mkdir = interrupted\n"
                           "from amaris_cli.memory.privatecopy import PrivateDirectory\nPrivateDirectory('amaris-memory-')"],
                          env={**clean_env(), "TMPDIR": str(temp)}, capture_output=True, text=True, timeout=60)
    assert "KeyboardInterrupt" in made.stderr and list(temp.iterdir()) == []


def test_sigterm_while_the_arguments_are_parsed_ends_the_command_as_terminated(tmp_path: Path) -> None:
    """A SIGTERM before the command's body starts (click still parsing its arguments: the first milliseconds of a job a
    scheduler preempts) says terminated and exits 143, as in the body; click read it as Ctrl-C: exit 130 without a word.
    The signal is sent from inside the parsing, so no timing is involved."""
    parsing = ("import os, signal\nfrom typer.core import TyperCommand\nparse = TyperCommand.parse_args\n"
               "def parse_args(self, ctx, args):\n"
               "    if self.name == 'score':\n        os.kill(os.getpid(), signal.SIGTERM)\n"
               "    return parse(self, ctx, args)\n"
               "TyperCommand.parse_args = parse_args\n"
               "from amaris_cli.cli import main\nmain()")
    proc = subprocess.Popen([sys.executable, "-c", parsing, "score", "--run", str(tmp_path / "run"), "--step", "0"],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=stop_signals())
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and TERMINATED in " ".join(err.split()) and "Aborted" not in err, (proc.returncode, err)
    assert not (tmp_path / "run").exists()
