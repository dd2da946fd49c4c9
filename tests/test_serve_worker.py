"""The evolution worker (amaris_cli/serve/worker.py) stopped by the server while no command runs."""

from __future__ import annotations

import subprocess
import sys

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
    program = PROGRAM.replace("time.sleep(3)", "pass")
    done = subprocess.run([sys.executable, "-c", program], stdin=subprocess.PIPE, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (130, "")
