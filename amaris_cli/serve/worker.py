"""A process that runs `amaris evolve` for `amaris serve`, one step after another, without starting again.

Each served step's evolution is the `amaris evolve` command (evolutions.py); run as a fresh process per
step, it paid its imports (the SDK, ChromaDB, the embedding model: 2-3 s of CPU, most of the evolution's
own work once its analyses are done early) on every step's critical path. This process imports them
once and runs the command for each step it is sent, exactly as its command line would: the CLI's own
entry point with `sys.argv` set to the command, so the step's lock names `amaris evolve --run R --step t
...` (with this process's pid), the exit code is the command's, and its output goes to the step's log.

Protocol (one job at a time): the server writes a JSON line `{"argv": [...], "log": PATH}` on stdin; this
process answers `{"code": N}` on its original stdout (the jobs' own stdout goes to their log). SIGINT
interrupts the running job as Ctrl-C interrupts `amaris evolve` (resumable), and ends the process; SIGTERM during
a job ends it as it ends `amaris evolve` (exit 143), and then the process.

    python -m amaris_cli.serve.worker
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

import orjson

INTERRUPTED = 130
TERMINATED = 143  # the job got SIGTERM (amaris_cli/cli.py:main)
STOPPED = (INTERRUPTED, TERMINATED)  # the worker ends after such a job


def _leave(signum: int, frame: FrameType | None) -> None:
    """SIGINT while no command runs (the worker imports, or waits for a step): nothing to save or resume, so
    the worker leaves at once. A KeyboardInterrupt raised inside an import may surface as another error (in a
    class body's __set_name__ Python wraps it in a RuntimeError), with a traceback on the server's stderr."""
    os._exit(INTERRUPTED)


def run_job(argv: list[str], log: str) -> int:
    """The command `amaris ARGV`, its stdout and stderr appended to `log`; its exit code."""
    from amaris_cli.cli import main

    saved = os.dup(1), os.dup(2)
    sys.stdout.flush()
    sys.stderr.flush()
    with open(log, "ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.argv = ["amaris", *argv]
    # While the command runs, Ctrl-C is Python's, as in `amaris evolve` itself: asyncio's runner then cancels the
    # command's task and lets it finish its cleanup (with another handler, the KeyboardInterrupt was raised
    # inside the event loop and left the task pending: "Task was destroyed but it is pending!").
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = INTERRUPTED
    finally:
        signal.signal(signal.SIGINT, _leave)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return code


def _preload() -> None:
    """What every evolution imports, once, while no job waits for it (without the garbage collector, as
    every preload: amaris_cli/preload.py)."""
    from amaris_cli.preload import without_collection

    with without_collection():
        import amaris_cli.cli  # noqa: F401
        import amaris_cli.jobs  # noqa: F401
        import amaris_cli.stages.evolve  # noqa: F401

        try:
            import chromadb  # noqa: F401
            import openai  # noqa: F401
        except Exception:  # noqa: BLE001 - the job imports them again and reports the error
            pass


def main() -> int:
    signal.signal(signal.SIGINT, _leave)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # nothing but replies on the protocol's stream
    try:
        _preload()
        for line in sys.stdin.buffer:
            job = orjson.loads(line)
            code = run_job(list(job["argv"]), str(job["log"]))
            replies.write(orjson.dumps({"code": code}) + b"\n")
            if code in STOPPED:  # the server stops (its interrupt ended the command), or the worker was terminated
                return code
    except KeyboardInterrupt:
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
