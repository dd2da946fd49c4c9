"""No response of `amaris serve` waits for Nagle's algorithm (issue 26).

uvicorn sends a response's headers and body in two writes. On a socket without TCP_NODELAY, the kernel holds
the body until the client ACKs the headers, and clients delay that ACK by 40 ms: every response, /health
included, took 44 ms. asyncio sets TCP_NODELAY on an accepted socket only when the listening socket was
created with IPPROTO_TCP, so this checks the option on the server side of a real connection, accepted by
uvicorn on the socket `amaris serve` listens on. It is a structural check, not a timing: a timing test
would be flaky on a shared machine (bench/run.py case 8 measures the latency)."""

from __future__ import annotations

import asyncio
import socket

from amaris_cli.serve import server


async def _hello(scope: dict, receive, send) -> None:  # noqa: ANN001 - a minimal ASGI app
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def _nodelay_of_accepted_connections(listener: socket.socket) -> list[int]:
    """TCP_NODELAY of the server side of one keep-alive connection, after a request was answered on it."""

    async def main() -> list[int]:
        uv = server._uvicorn_server(_hello, lambda: None)  # type: ignore[arg-type]
        serving = asyncio.create_task(uv.serve(sockets=[listener]))
        try:
            for _ in range(200):  # bounded: uvicorn starts in a few ms
                if uv.started:
                    break
                await asyncio.sleep(0.01)
            assert uv.started, "uvicorn did not start"
            reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            writer.write(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"hello"), 10)
            assert head.startswith(b"HTTP/1.1 200"), head
            accepted = [c.transport.get_extra_info("socket") for c in uv.server_state.connections]
            values = [s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted]
            writer.close()
            return values
        finally:
            uv.should_exit = True
            await asyncio.wait_for(serving, 30)

    return asyncio.run(main())


def test_the_served_connections_send_without_waiting_for_an_ack() -> None:
    listener = server._listen("127.0.0.1", 0)
    try:
        values = _nodelay_of_accepted_connections(listener)
    finally:
        listener.close()
    assert len(values) == 1 and values[0] != 0, f"TCP_NODELAY of the accepted connection: {values}"


def test_the_check_fails_on_a_listening_socket_created_as_before() -> None:
    """The control: a socket created with protocol 0 (what `_listen` did) gives connections without the option,
    so the test above would fail if `_listen` went back to it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        values = _nodelay_of_accepted_connections(listener)
    finally:
        listener.close()
    assert values == [0]
