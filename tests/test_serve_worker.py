"""The evolution worker (amaris_cli/serve/worker.py) stopped by the server while no command runs."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from tests.conftest import invoke, judge_env, new_run, process_env, step_file, stop_signals, wait_until

PROGRAM = """
import os, signal, threading, time
from amaris_cli.serve import worker

class SlowField:  # an import that is inside a class body's __set_name__ when the signal comes
    def __set_name__(self, owner, name):
        time.sleep(3)

def imports():
    class Settings:
        field = SlowField()

worker._preload = imports
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
raise SystemExit(worker.main())
"""


def test_an_interrupt_while_the_worker_imports_ends_it_quietly() -> None:
    """The server interrupts a worker that was sent a step but still imports (it stops right after a step
    completed). Python turns a KeyboardInterrupt inside __set_name__ into a RuntimeError, which printed a
    traceback on the server's stderr; the worker now leaves at once with 130 when no command runs."""
    done = subprocess.run([sys.executable, "-c", PROGRAM], stdin=subprocess.PIPE, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (130, "")


def test_an_interrupt_while_the_worker_waits_for_a_command_ends_it_quietly() -> None:
    """Its input stays open (the server has no step for it yet) when the interrupt comes."""
    program = PROGRAM.replace("time.sleep(3)", "pass")
    worker = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert worker.wait(60) == 130, "the worker ended before the interrupt or did not leave on it"
        assert worker.stderr is not None and worker.stderr.read() == ""
    finally:
        if worker.poll() is None:
            worker.kill()
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
                         ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_during_a_command_ends_it_as_ctrl_c_ends_amaris_evolve(tmp_path: Path, sig: int, code: int,
                                                                            said: str) -> None:
    """The server stops while a step evolves: the worker's command is interrupted as Ctrl-C interrupts `amaris
    evolve` (asyncio cancels its task, which finishes its cleanup), answers 130, leaves, and prints nothing;
    a later evolve finishes the step. SIGTERM (the worker's own, from `kill` or a supervisor) ends the command as it
    ends `amaris evolve`, 143, and then the worker (it answered 143 and waited for its next step). (With the worker's own handler during the command, the KeyboardInterrupt
    was raised inside the event loop: this failed in about one run of three, "Task was destroyed but it is
    pending!" on the worker's stderr.)"""
    with SimJudge(SimJudgeConfig(latency=0.3)) as sim:
        run = new_run(tmp_path)
        assert invoke("score", step_file(0), "--run", run, "--step", 0, env=judge_env(sim)).exit_code == 0
        worker = subprocess.Popen([sys.executable, "-m", "amaris_cli.serve.worker"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=process_env(sim),
                                  preexec_fn=stop_signals())
        assert worker.stdin is not None and worker.stdout is not None and worker.stderr is not None
        try:
            job = {"argv": ["evolve", "--run", str(run), "--step", "0", "--quiet"], "log": str(tmp_path / "evolve.log")}
            worker.stdin.write(orjson.dumps(job) + b"\n")
            worker.stdin.flush()
            calls = run / "calls.jsonl"
            wait_until(lambda: b'"analyzer"' in calls.read_bytes(), 60, "the command's first analysis")
            worker.send_signal(sig)
            assert orjson.loads(worker.stdout.readline()) == {"code": code}
            assert worker.wait(60) == code
            assert worker.stderr.read().decode() == ""
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        assert said in (tmp_path / "evolve.log").read_text().lower()
        again = invoke("evolve", "--run", run, "--step", 0, env=judge_env(sim))
        assert again.exit_code == 0, again.stderr
