"""A small HTTP/1.1 load generator for the serve benchmark: prepared requests over keep-alive connections.

    python bench/loadgen.py URL REQUESTS.jsonl --concurrency C

REQUESTS.jsonl holds one request a line: {"method", "path", "body"} (body: a JSON value or null). C
connections send them in order, each waiting for its answer before sending the next (closed loop), so
the figures are the server's latency and throughput at C requests in flight. Prints one JSON line on
stdout: {"requests", "wall_s", "latencies_ms", "statuses", "cpu_s"} (cpu_s: this process's own CPU, to
show that the generator is not the bottleneck). A request costs it one write and a Content-Length read:
a few tens of microseconds, against milliseconds for a judged rollout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from urllib.parse import urlparse


def prepare(host: str, method: str, path: str, body: object) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    return head.encode() + data


async def run(url: str, requests: list[bytes], concurrency: int, timeout: float) -> dict[str, object]:
    parsed = urlparse(url)
    latencies: list[float] = [0.0] * len(requests)
    statuses: dict[str, int] = {}
    position = 0

    async def worker() -> None:
        nonlocal position
        reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port)
        try:
            while position < len(requests):
                index = position
                position += 1
                started = time.perf_counter()
                writer.write(requests[index])
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await asyncio.wait_for(reader.readexactly(length), timeout)
                latencies[index] = time.perf_counter() - started
                status = head.split(b" ", 2)[1].decode()
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"requests": len(requests), "wall_s": time.perf_counter() - started,
            "latencies_ms": [round(t * 1000, 4) for t in latencies], "statuses": statuses,
            "cpu_s": time.process_time() - cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("requests")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per answer")
    args = parser.parse_args()
    host = urlparse(args.url).netloc
    with open(args.requests) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    requests = [prepare(host, r["method"], r["path"], r.get("body")) for r in rows]
    result = asyncio.run(run(args.url, requests, args.concurrency, args.timeout))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
