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


def test_sigterm_ends_memory_search_and_removes_its_private_copy(tmp_path: Path, sim) -> None:
    """`memory search` reads a private copy of the run's embedded memory, made in a temporary directory
    (amaris-memory-*) that it removes when it closes. Killed by SIGTERM it left it there: a full copy of the memory,
    growing with the run, for every search a scheduler or `timeout` ended. The copy is taken under the memory's io
    lock, which this test holds as a writer mid-write does: the search has its directory and waits, whatever the
    timing."""
    run = new_scenario_run(tmp_path)
    assert invoke("loop", EXAMPLES / "math", "--run", run, "--steps", "0:0", env=judge_env(sim)).exit_code == 0
    temp = tmp_path / "tmp"  # the child's TMPDIR: every amaris-memory-* in it is its own
    temp.mkdir()
    query = ("memory", "search", "--run", run, "note to the grader award full marks", "--json")
    with locks.brief(RunDir(run).lock_path(IO_LOCK)):
        proc = amaris({**process_env(sim), "TMPDIR": str(temp)}, *query)
        wait_until(lambda: any(temp.glob("amaris-memory-*")) or proc.poll() is not None, timeout=60,
                   what="the search's private copy")
        assert proc.poll() is None, proc.communicate()
        code, err = terminate(proc)
    assert list(temp.iterdir()) == []
    assert code == 143 and TERMINATED in " ".join(err.split()), (code, err)
    assert json.loads(invoke(*query, env=judge_env(sim)).stdout)  # the same search, run again, finds the memory


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
