"""The evolution of a served step, run as the online mode runs it: `amaris evolve --run R --step t`
in a child process, started when the step is complete.

A child process, not a thread: analysis, summaries, embeddings and the memory then never compete
with the server's event loop for the GIL, so answering /score stays fast while a step evolves, and
the step lock names a command a person can read and re-run (`pid N: amaris evolve --run R --step t`).
Evolutions keep the online mode's guarantees because they are that command: each takes its step's
lock, waits for the evolutions of earlier steps (step order) and for the memory's writer lock (one
memory writer), and records `done` or `failed` in the step's provenance.

A driver waits while another process holds the step (a hand-started `evolve`, or the child of a
server that was killed), then starts the child if the evolution is still not done. The child's
output goes to `RUN/.serve/evolve-NNNNNN.log`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from amaris_cli import artifacts, locks
from amaris_cli.options import EvolveOptions
from amaris_cli.rundir import RunDir
from amaris_cli.serve.journal import serve_dir

POLL_S = 0.1
LOCKED_EXIT = 3  # the child found the step held by another process


def evolve_argv(options: EvolveOptions) -> list[str]:
    """The child's command line: `amaris evolve` with the options object serialized whole."""
    return [sys.executable, "-m", "amaris_cli", "evolve", *options.to_argv(), "--quiet"]


def log_path(run: RunDir, step: int) -> Path:
    return serve_dir(run) / f"evolve-{step:06d}.log"


@dataclass
class Evolution:
    """One step's evolution as the server drives it."""

    step: int
    state: str = "evolving"  # evolving, done, failed, idle (stopped before it finished)
    error: str | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None


class Evolutions:
    def __init__(self, run: RunDir, options_for: Callable[[int], EvolveOptions], say: Callable[[str], None]) -> None:
        self.options_for = options_for  # the server's options, as `amaris evolve` of a step takes them
        self.run = run
        self.say = say
        self.by_step: dict[int, Evolution] = {}
        self.stopping = False

    def start(self, step: int, on_done: Callable[[Evolution], None] | None = None,
              before: Callable[[], Awaitable[None]] | None = None) -> Evolution:
        """Drive the step's evolution unless it is already being driven; `before` runs first (the server
        hands the step over: its early analyses settle, its lock is released)."""
        current = self.by_step.get(step)
        if current is not None and not current.finished.is_set():
            return current
        evolution = Evolution(step)
        self.by_step[step] = evolution

        async def drive() -> None:
            try:
                if before is not None:
                    await before()
                await self._drive(evolution)
            except Exception as exc:  # noqa: BLE001 - reported as the evolution's failure, never lost
                evolution.state, evolution.error = "failed", f"{type(exc).__name__}: {exc}"
            finally:
                evolution.process = None
                evolution.finished.set()
                if on_done is not None:
                    on_done(evolution)

        evolution.task = asyncio.create_task(drive())
        return evolution

    def running(self, step: int) -> bool:
        evolution = self.by_step.get(step)
        return evolution is not None and not evolution.finished.is_set()

    async def _drive(self, evolution: Evolution) -> None:
        step = evolution.step
        options = self.options_for(step)
        deadline = time.monotonic() + options.wait
        started = 0
        told = False
        while True:
            if self.stopping:
                evolution.state = "idle"
                return
            holder = locks.holder(self.run.step_lock_path(step))
            if holder is not None:
                if not told:
                    self.say(f"step {step}: waiting while {holder} holds the step")
                    told = True
                if time.monotonic() > deadline:
                    evolution.state = "failed"
                    evolution.error = f"gave up after {options.wait:g}s waiting for {holder}"
                    return
                await asyncio.sleep(POLL_S)
                continue
            mark = artifacts.evolution(self.run, step)
            if mark is not None and mark.status == "done":
                evolution.state = "done"
                return
            if started:
                evolution.state = "failed"
                evolution.error = (mark.error if mark is not None and mark.error else
                                   f"`amaris evolve` ended without finishing; see {log_path(self.run, step)}")
                return
            code = await self._child(evolution, evolve_argv(options))
            if code != LOCKED_EXIT:
                started += 1

    async def _child(self, evolution: Evolution, argv: list[str]) -> int:
        log = log_path(self.run, evolution.step)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            # Its own session: a Ctrl-C in the server's terminal reaches the server, which then
            # interrupts the child itself (stop()), so the two never race.
            evolution.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=out,
                start_new_session=True)
        return await evolution.process.wait()

    async def stop(self, grace: float = 20.0) -> None:
        """Interrupt running children (as Ctrl-C would interrupt `amaris evolve`: resumable), wait for
        them up to `grace` seconds, then kill what is left."""
        self.stopping = True
        pending = [e for e in self.by_step.values() if not e.finished.is_set()]
        for evolution in pending:
            if evolution.process is not None and evolution.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    evolution.process.send_signal(signal.SIGINT)
        tasks = [e.task for e in pending if e.task is not None]
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace)
        for evolution in pending:
            if evolution.process is not None and evolution.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    evolution.process.kill()
        if late:
            await asyncio.wait(late, timeout=5)
