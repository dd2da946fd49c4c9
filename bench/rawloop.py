"""The reference client: a raw AsyncOpenAI worker pool, nothing else, run as its own process.

    python bench/rawloop.py REQUESTS.jsonl --base-url URL [--concurrency 64] [--http httpx|aiohttp]

Each line of REQUESTS.jsonl is {"messages": [...], "max_tokens": N} (scorer requests prepared by
the bench, so no prompt is rendered here). `--concurrency` workers take the next request and send it
with `client.chat.completions.create` (the SDK's ordinary path: parameter transform, request
building, response model), the SDK's retries off, on the SDK's default HTTP client (httpx) or, with
`--http aiohttp`, on its aiohttp transport (`DefaultAioHttpClient`). Prints {"calls", "wall_s"} on stdout; the bench
times the whole process (start-up and `import openai` included), as it times `amaris score`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any


async def run(requests: list[dict[str, Any]], base_url: str, model: str, concurrency: int, http: str) -> int:
    from openai import AsyncOpenAI, DefaultAioHttpClient

    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60,
                         http_client=DefaultAioHttpClient() if http == "aiohttp" else None)
    pending = iter(requests)
    done = 0

    async def worker() -> None:
        nonlocal done
        for request in pending:
            completion = await client.chat.completions.create(
                model=model, messages=request["messages"], temperature=0.0, max_tokens=request["max_tokens"],
                response_format={"type": "json_object"})
            if completion.choices[0].message.content:
                done += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await client.close()
    return done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("requests")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="canned")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--http", choices=("httpx", "aiohttp"), default="httpx")
    args = parser.parse_args()
    started = time.perf_counter()
    with open(args.requests, encoding="utf-8") as fh:
        requests = [json.loads(line) for line in fh]
    calls = asyncio.run(run(requests, args.base_url, args.model, args.concurrency, args.http))
    print(json.dumps({"calls": calls, "wall_s": round(time.perf_counter() - started, 3)}))


if __name__ == "__main__":
    main()
