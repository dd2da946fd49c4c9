"""Where amaris runs its coroutines: uvloop's event loop where it is installed, asyncio's otherwise.

Every amaris process spends much of its CPU in the event loop and its socket transports (`serve` takes a
request, asks the judge, answers; `score` and `evolve` keep hundreds of judge requests in flight). uvloop
does that work in C: measured side by side, `amaris serve` answers about 20% more `/score` requests per
second at C=1 with the same CPU (bench/README.md, case 8). It is the loop uvicorn picks by default, and it
comes with chromadb's `uvicorn[standard]`; amaris declares it for the platforms it builds on.

`AMARIS_EVENT_LOOP=asyncio` keeps asyncio's own loop (to tell a loop's fault from amaris's own).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_STOP: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("amaris_stop", default=None)
_MAIN: contextvars.ContextVar[asyncio.Task[Any] | None] = contextvars.ContextVar("amaris_main", default=None)


def loop_factory(environ: Any = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None for asyncio's default loop (asked for, or uvloop not installed)."""
    if (os.environ if environ is None else environ).get("AMARIS_EVENT_LOOP", "").lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the loop above: a new loop, closed with its async generators and executor. Called
    from a running loop it raises as asyncio.run does, before making a loop (as a context manager the runner
    made its loop first, and failed again closing it)."""

    async def command() -> T:
        _MAIN.set(asyncio.current_task())  # the task Ctrl-C and SIGTERM cancel (stopping), seen by the tasks it makes
        return await main

    runner, wrapped = asyncio.Runner(loop_factory=loop_factory()), command()
    try:
        return runner.run(wrapped)
    finally:
        try:
            runner.close()  # its tasks cancelled and run to their end first
        finally:
            wrapped.close()  # never started where the runner refused (a running loop): no second "never awaited"


async def blocking(wait: Callable[[threading.Event], T], finish: bool = False) -> T:
    """A blocking wait (for another process's evolution, polling the disk) run in a thread, so that the event
    loop goes on: Ctrl-C cancels the command's task at once. Run in the loop itself, the wait held Ctrl-C until
    it ended (`--wait`, an hour by default), and `amaris serve`'s stop killed its evolution after a grace.
    `wait` gets an event that is set when the task is cancelled, and must end soon after; code it calls finds the
    event with `stopping()`. `finish`: cancelled, the task ends only once the thread has (work on a resource the
    task's caller closes next, such as the memory store, must not go on under it)."""
    stop = threading.Event()

    def waiting() -> T:
        _STOP.set(stop)  # in the thread's copy of the context
        return wait(stop)

    # asyncio.to_thread's future, not a task: a KeyboardInterrupt the work raises at a stop (memory/embeddings.py)
    # comes out of a task's step into the event loop itself, past the wait for it below
    thread = asyncio.get_running_loop().run_in_executor(None, contextvars.copy_context().run, waiting)
    try:
        return await asyncio.shield(thread)
    except asyncio.CancelledError:
        stop.set()
        if not finish:
            thread.cancel()  # its outcome dropped (the thread ends on its own)
        while finish and not thread.done():
            with contextlib.suppress(BaseException):  # a second cancellation too: the thread is waited for
                await asyncio.shield(thread)
        if thread.done() and not thread.cancelled():
            thread.exception()  # taken, not logged: the cancellation is what the caller gets
        raise


def stopping() -> bool:
    """Whether the command is stopping (Ctrl-C, SIGTERM), for blocking code that waits in steps: in a `blocking`
    thread, its task was cancelled; on the thread of a loop `run` runs, the command's task was asked to stop (as
    asyncio's runner does at Ctrl-C; the loop does not run while that code waits, so the cancellation cannot reach it
    any other way). Not any task's cancellation: one a `wait_for` timed out, or a worker `bounded_map` stops, is
    pending until the task runs again, and read as Ctrl-C it ended the command with exit 130. Elsewhere (no loop:
    Ctrl-C raises KeyboardInterrupt there at once) False."""
    if (stop := _STOP.get()) is not None:
        return stop.is_set()
    return (main := _MAIN.get()) is not None and main.cancelling() > 0
