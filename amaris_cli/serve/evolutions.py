"""The evolution of a served step, run as the online mode runs it: `amaris evolve --run R --step t`
in a child process, once the step is complete.

A child process, not a thread: analysis, summaries, embeddings and the memory then never compete
with the server's event loop for the GIL, so answering /score stays fast while a step evolves, and
the step lock names a command a person can read and re-run (`pid N: amaris evolve --run R --step t`).
Evolutions keep the online mode's guarantees because they are that command: each takes its step's
lock, waits for the evolutions of earlier steps (step order) and for the memory's writer lock (one
memory writer), and records `done` or `failed` in the step's provenance.

The child is a worker (worker.py) that runs the command for one step after another: its imports (the
SDK, ChromaDB, the embedding model) are paid once, not on each step's critical path. A worker is kept
warm: one is started when a step opens if none is idle, and a worker that finished a step waits for the
next. A step whose evolution comes while every worker is busy (evolutions of several steps at once: the
later ones wait inside their command for the earlier ones) gets a new worker, so none waits for another.

A driver waits while another process holds the step (a hand-started `evolve`, or the child of a
server that was killed), then runs the command if the evolution is still not done. Its output goes to
`RUN/.serve/evolve-NNNNNN.log`.
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

import orjson

from amaris_cli import artifacts, locks
from amaris_cli.options import EvolveOptions
from amaris_cli.rundir import RunDir
from amaris_cli.serve.journal import serve_dir
from amaris_cli.serve.worker import STOPPED

POLL_S = 0.1
LOCKED_EXIT = 3  # the child found the step held by another process
WORKER_GONE = -1  # the worker ended without answering (killed, or it crashed)


def evolve_argv(options: EvolveOptions) -> list[str]:
    """The command a worker runs: `amaris evolve` with the options object serialized whole."""
    return ["evolve", *options.to_argv(), "--quiet"]


class Worker:
    """One worker process (worker.py): runs one `amaris evolve` command at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def spawn(cls) -> Worker:
        # Its own session: a Ctrl-C in the server's terminal reaches the server, which then interrupts the
        # worker itself (stop()), so the two never race. Between commands its stderr is the server's (a
        # command's output goes to its step's log).
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "amaris_cli.serve.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, start_new_session=True)
        return cls(process)

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def run(self, argv: list[str], log: Path) -> int:
        """The command's exit code (WORKER_GONE when the worker ended first)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.process.stdin.write(orjson.dumps({"argv": argv, "log": str(log)}) + b"\n")
            await self.process.stdin.drain()
            reply = await self.process.stdout.readline()
        except (BrokenPipeError, ConnectionResetError):
            reply = b""
        if not reply:
            await self.process.wait()
            return WORKER_GONE
        return int(orjson.loads(reply)["code"])

    def interrupt(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGINT)

    def kill(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


def log_path(run: RunDir, step: int) -> Path:
    return serve_dir(run) / f"evolve-{step:06d}.log"


@dataclass
class Evolution:
    """One step's evolution as the server drives it."""

    step: int
    state: str = "evolving"  # evolving, done, failed, idle (stopped before it finished)
    error: str | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    worker: Worker | None = None  # while its command runs
    task: asyncio.Task[None] | None = None


class Evolutions:
    def __init__(self, run: RunDir, options_for: Callable[[int], EvolveOptions], say: Callable[[str], None]) -> None:
        self.options_for = options_for  # the server's options, as `amaris evolve` of a step takes them
        self.run = run
        self.say = say
        self.by_step: dict[int, Evolution] = {}
        self.stopping = False
        self._idle: list[Worker] = []
        self._busy: set[Worker] = set()
        self._spawning: asyncio.Task[Worker] | None = None

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
                evolution.worker = None
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
            code = await self._command(evolution, evolve_argv(options))
            if code != LOCKED_EXIT:
                started += 1

    # --- workers -------------------------------------------------------------------------------------
    def warm(self) -> None:
        """Have a worker ready for the next evolution (a step just opened): its start-up then overlaps with
        the step's rollouts instead of following the step's /complete."""
        if not self._idle and self._spawning is None and not self.stopping:
            self._spawning = asyncio.create_task(Worker.spawn())

    async def _worker(self) -> Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive:
                return worker
        if self._spawning is not None:
            spawning, self._spawning = self._spawning, None
            return await spawning
        return await Worker.spawn()

    async def _command(self, evolution: Evolution, argv: list[str]) -> int:
        worker = await self._worker()
        self._busy.add(worker)
        evolution.worker = worker
        try:
            code = await worker.run(argv, log_path(self.run, evolution.step))
        finally:
            evolution.worker = None
            self._busy.discard(worker)
        if worker.alive and code not in STOPPED and not self.stopping and not self._idle:  # 130, 143: the worker ends
            self._idle.append(worker)
        elif worker.alive and worker.process.stdin is not None:
            worker.process.stdin.close()  # one idle worker is kept warm: this one ends
        return code

    async def stop(self, grace: float = 20.0) -> None:
        """Interrupt running commands (as Ctrl-C would interrupt `amaris evolve`: resumable), wait for
        them up to `grace` seconds, then kill what is left; idle workers end with their input."""
        self.stopping = True
        if self._spawning is not None:
            spawning, self._spawning = self._spawning, None
            self._idle.append(await spawning)
        for worker in self._idle:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
        for worker in self._busy:
            worker.interrupt()
        tasks = [e.task for e in self.by_step.values() if not e.finished.is_set() and e.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            if late:
                for worker in list(self._busy):
                    worker.kill()
                await asyncio.wait(late, timeout=5)
        for worker in [*self._idle, *self._busy]:
            try:
                await asyncio.wait_for(worker.process.wait(), timeout=grace)
            except TimeoutError:
                worker.kill()
                await worker.process.wait()
        self._idle.clear()
