"""Running `amaris serve`: the core, the ASGI app on uvicorn, and a clean stop on SIGINT/SIGTERM.

On a signal the server stops taking rollouts (503), lets uvicorn finish the requests in flight for up
to GRACE_S seconds, waits for judgements still running and journals them, interrupts running
evolutions (as Ctrl-C interrupts `amaris evolve`: they resume), and releases its locks. A restart with
the same run directory goes on from the journals: open steps take further rollouts, complete steps
finish their evolution.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from amaris_cli import eventloop
from amaris_cli.errors import AmarisError
from amaris_cli.options import ServeOptions
from amaris_cli.serve.app import ServeApp
from amaris_cli.serve.core import ServeCore

GRACE_S = 30.0
# How long a connection waits for its client's next request: longer than clients keep an idle one (httpx: 5 s).
# At uvicorn's default (5 s, the same as httpx's), the server closed connections as clients sent on them.
KEEP_ALIVE_S = 75.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _uvicorn_server(app: ServeApp, on_signal: Callable[[], None]):  # noqa: ANN202 - uvicorn is imported lazily
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, told about the signal first (so long waits end at once), and without
        uvicorn's re-raising of the signal after the shutdown: amaris stops cleanly and exits 0."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            on_signal()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, lifespan="off", log_config=None, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=GRACE_S, timeout_keep_alive=KEEP_ALIVE_S)
    return Server(config)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, created with IPPROTO_TCP: asyncio sets TCP_NODELAY only on accepted sockets whose
    protocol says TCP (they inherit it from this one). Without it, uvicorn's two sends per response (headers,
    then body) meet Nagle's algorithm, and the body waits for the client's delayed ACK: 40 ms per response."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise AmarisError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


async def _serve(options: ServeOptions, say: Callable[[str], None], on_listening: Callable[[str], None]) -> int:
    host, port = options.host, options.port
    core = ServeCore(options, say)
    try:
        await core.start()
        sock = _listen(host, port)
    except BaseException:
        await core.stop()
        raise
    shown = f"[{host}]" if ":" in host else host
    on_listening(f"http://{shown}:{sock.getsockname()[1]}")
    loop = asyncio.get_running_loop()
    server = _uvicorn_server(ServeApp(core), lambda: loop.call_soon_threadsafe(core.begin_stop))
    try:
        await server.serve(sockets=[sock])
    finally:
        await core.stop()
        sock.close()
    open_steps = sorted(core.steps)
    if open_steps:
        say(f"stopped with step(s) {', '.join(map(str, open_steps))} open: their judged rollouts are journaled "
            f"in {options.run}/.serve; `amaris serve --run {options.run}` goes on with them")
    else:
        say("stopped")
    return 0


def run_server(options: ServeOptions, say: Callable[[str], None], on_listening: Callable[[str], None]) -> int:
    """Serve until SIGINT or SIGTERM; `on_listening(url)` is called once the socket accepts."""
    return eventloop.run(_serve(options, say, on_listening))
