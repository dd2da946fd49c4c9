"""A canned-reply OpenAI-compatible server that is never the bottleneck of a client benchmark.

    python bench/canned.py [--port 0] [--workers 1]

Prints `OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 PIDS=...` on stderr once it listens. It answers
POST /v1/chat/completions with a fixed, valid scorer answer for the criteria of the request's
rubric: the reply depends only on the system message (the rubric), so it is built once per rubric
and then sent as prepared bytes; a request costs an HTTP parse, a dict lookup and one write.
Requests of other agents (the analyzer, the summarizer, ... of `amaris evolve`) are answered by the
sim-judge's rules (slower, but off the scorer's path this server exists to measure).

Control endpoints (for the bench, not part of any API):
  GET  /_stats   {"requests", "first", "last", "cpu_s", "first_cpu"}: chat requests since the last reset,
                 the wall-clock time (time.time()) of the first and last arrival, this worker's CPU, and
                 the CPU time of the watched client when its first request arrived (-1: none)
  POST /_reset   zero the counters
  POST /_watch?pid=N  watch client N (a process the bench just spawned)

`--workers N` forks N-1 more processes accepting on the same socket (twice the capacity, to check
that the server is not what limits a client); /_stats then describes the worker that answered it.
It is a plain asyncio.Protocol with a hand-written HTTP/1.1 parser (keep-alive, Content-Length
bodies; what httpx sends), on uvloop when it is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import orjson

RUBRIC_ID = re.compile(r'"id": "((?:[^"\\]|\\.)*)"')
REASON = ("The response meets this criterion: the final answer is stated plainly, the working is shown "
          "line by line and it matches the reference.")


class Stats:
    requests = 0
    first = 0.0
    last = 0.0
    watch = 0  # a client's pid: its CPU time is read when its first request arrives
    first_cpu = -1.0

    @classmethod
    def reset(cls) -> None:
        cls.requests, cls.first, cls.last, cls.watch, cls.first_cpu = 0, 0.0, 0.0, 0, -1.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, threads that already ended included (/proc/PID/stat, in
    clock ticks: 10 ms). Not the threads' schedstat: a thread that ended (amaris imports the SDK in one) is
    no longer listed there."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _response(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = {200: b"OK", 404: b"Not Found", 400: b"Bad Request"}.get(status, b"Error")
    return (b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (status, reason, content_type, len(body))) + body


def _completion(content: str, prompt_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-canned", "object": "chat.completion", "created": int(time.time()), "model": "canned",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "refusal": None},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(content) // 4,
                  "total_tokens": prompt_tokens + len(content) // 4},
    }


class Replies:
    """Prepared response bytes per rubric (system message)."""

    def __init__(self) -> None:
        self._by_system: dict[str, bytes] = {}

    def chat(self, body: bytes) -> bytes:
        request = orjson.loads(body)
        messages = request["messages"]
        system = messages[0]["content"] if messages and messages[0].get("role") == "system" else ""
        cached = self._by_system.get(system)
        if cached is not None:
            return cached
        if system.startswith("# amaris/scorer"):
            rubric = system.split("The rubric (JSON)", 1)[-1]
            ids = [orjson.loads(f'"{m}"') for m in RUBRIC_ID.findall(rubric)]
            content = orjson.dumps({"verdicts": [{"criterion_id": i, "score": 1, "reason": REASON} for i in ids]}).decode()
            reply = _response(200, orjson.dumps(_completion(content, len(body) // 4)))
            if len(self._by_system) < 1024:
                self._by_system[system] = reply
            return reply
        from amaris_cli.simjudge import rules  # every other agent: the sim-judge's rules, not cached

        _agent, answer = rules.answer(messages)
        return _response(200, orjson.dumps(_completion(orjson.dumps(answer or {}).decode(), len(body) // 4)))


class Http(asyncio.Protocol):
    replies = Replies()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
                    break
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4:end + 4 + length]
            self.buffer = self.buffer[end + 4 + length:]
            method, path = head.split(b" ", 2)[:2]
            self.transport.write(self.route(method, path, body))

    def route(self, method: bytes, path: bytes, body: bytes) -> bytes:
        if method == b"POST" and path.endswith(b"/chat/completions"):
            now = time.time()
            Stats.requests += 1
            if not Stats.first and Stats.watch:
                try:
                    Stats.first_cpu = cpu_seconds(Stats.watch)
                except FileNotFoundError:
                    pass
            Stats.first = Stats.first or now
            Stats.last = now
            try:
                return self.replies.chat(body)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                return _response(400, orjson.dumps({"error": {"message": f"bad request: {exc}"}}))
        if path == b"/_stats":
            return _response(200, orjson.dumps({"requests": Stats.requests, "first": Stats.first, "last": Stats.last,
                                                "cpu_s": time.process_time(), "pid": os.getpid(),
                                                "first_cpu": Stats.first_cpu}))
        if path == b"/_reset":
            Stats.reset()
            return _response(200, b"{}")
        if path.startswith(b"/_watch?pid="):
            Stats.watch = int(path.split(b"=", 1)[1]) if not Stats.first else 0  # too late once a request arrived
            return _response(200, b"{}")
        return _response(404, b'{"error": {"message": "not found"}}')


def serve(sock: socket.socket) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Http, sock=sock, backlog=1024)
        stopped = loop.create_future()
        loop.add_signal_handler(signal.SIGTERM, lambda: stopped.done() or stopped.set_result(None))
        async with server:
            await stopped

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="processes accepting on the socket")
    args = parser.parse_args()
    # IPPROTO_TCP: plain asyncio (without uvloop) sets TCP_NODELAY only on sockets accepted from such a socket
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(1024)
    sock.setblocking(False)
    pids = [os.getpid()]
    for _ in range(args.workers - 1):
        pid = os.fork()
        if pid == 0:
            serve(sock)
            return
        pids.append(pid)
    port = sock.getsockname()[1]
    print(f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1 PIDS={','.join(map(str, pids))}", file=sys.stderr, flush=True)
    try:
        serve(sock)  # until SIGTERM
    except KeyboardInterrupt:
        pass
    finally:
        for child in pids[1:]:
            try:
                os.kill(child, signal.SIGTERM)
                os.waitpid(child, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


if __name__ == "__main__":
    main()
