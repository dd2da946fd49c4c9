"""Benchmark: what the evolution of a served step has left after /complete, and what /score pays for it.

`amaris serve` (async mode) against the sim-judge at `--latency` seconds, driven as a trainer drives it:
per step, `--rollouts` rollouts posted `--concurrency` at a time, then `POST /complete`, then the wait for
the step's update. Side by side in one run, interleaved: this checkout's server with
`--no-early-analysis` (analysis starts at /complete) and with its default (each rollout analyzed as soon
as it is judged), and with `--baseline PYTHON` a server from another checkout (e.g. main's venv: its
evolutions as a process per step). Requests use amaris's own shapes, which every version takes. Printed
per server: the median /score latency (the judge's latency is the floor), the median time from
/complete to the step's update being done (the evolution's critical path, which a trainer at lag 1 must
hide behind training), and how many analyses the evolutions found already answered in calls.jsonl
(every rollout's when the early analyses did all the work).

    python bench/serve_evolution.py                      # 6 steps of 4 rollouts, 1 s latency, 3 rounds
    python bench/serve_evolution.py --baseline ../main/.venv/bin/python
    python bench/serve_evolution.py --rollouts 16 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amaris_cli.serve.client import AmarisClient  # noqa: E402


def amaris(python: str = sys.executable) -> list[str]:
    return [python, "-m", "amaris_cli"]


@contextmanager
def process_url(args: list[str], pattern: str, env: dict[str, str], cwd: Path | None = None) -> Iterator[str]:
    """A process that prints its URL on stderr. `cwd`: outside any checkout, so that `python -m amaris_cli` of
    another venv runs that venv's amaris, not the one in the current directory."""
    proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        assert proc.stderr is not None
        url = None
        for _ in range(100):
            line = proc.stderr.readline()
            if (match := re.search(pattern, line)) or not line:
                url = match.group(1) if match else None
                break
        assert url, f"{args[3]} did not start"
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
        yield url
    finally:
        proc.terminate()
        proc.wait(120)


def rows(step: int, n: int) -> list[dict]:
    lines = (ROOT / "examples" / "math" / f"step-{step % 6:03d}.jsonl").read_text().splitlines()
    return list(map(json.loads, (lines * (n // len(lines) + 1))[:n]))


def analyses_from_the_log(run: Path) -> int:
    """Analyses the evolution children found answered in calls.jsonl (the server's early ones)."""
    calls = [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]
    return sum(1 for c in calls if c["agent"] == "analyzer" and c["source"] == "cache")


def one_round(server: list[str], env: dict[str, str], steps: int, n: int, concurrency: int,
              llm_concurrency: int) -> tuple[list, list, int]:
    with tempfile.TemporaryDirectory(prefix="amaris-serve-evolution-") as tmp:
        run, config = Path(tmp) / "run", Path(tmp) / "amaris.toml"
        example = (ROOT / "examples" / "amaris.toml").read_text()
        config.write_text(example.replace("[llm]\nconcurrency = 32", f"[llm]\nconcurrency = {llm_concurrency}"))
        subprocess.run([*server[:3], "init", str(run), "--config", str(config)], env=env,
                       check=True, capture_output=True, timeout=120, cwd=tmp)  # the run as that version makes it
        latencies: list[float] = []
        evolutions: list[float] = []
        with process_url([*server, "--run", str(run), "--port", "0"], r"amaris serve listening: (http://\S+)",
                         env, cwd=Path(tmp)) as url:
            client = AmarisClient(url, timeout=600)

            async def train() -> None:
                slots = asyncio.Semaphore(concurrency)

                async def one(step: int, i: int, row: dict) -> None:
                    async with slots:
                        began = time.perf_counter()
                        await client.score_async(row["input"], row["output"], reference=row["supplemental_context"],
                                                 id=f"s{step}-r{i}", step=step)
                        latencies.append(time.perf_counter() - began)

                for step in range(steps):
                    await asyncio.gather(*(one(step, i, r) for i, r in enumerate(rows(step, n))))
                    began = time.perf_counter()
                    await client.rollouts_complete_async(step)
                    status = await client.rubric_updated_async(step, timeout=600)
                    evolutions.append(time.perf_counter() - began)
                    assert status.state == "done", status

            asyncio.run(train())
        reused = analyses_from_the_log(run)
    return latencies, evolutions, reused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per step")
    parser.add_argument("--concurrency", type=int, default=4, help="rollouts in flight at once")
    parser.add_argument("--latency", type=float, default=1.0, help="the sim-judge's latency per call")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every server, interleaved")
    parser.add_argument("--baseline", help="the python of another checkout's venv, whose server runs beside")
    parser.add_argument("--llm-concurrency", type=int, default=64,
                        help="llm.concurrency of the run (examples/amaris.toml otherwise; the scorer's is 32: early "
                        "analyses use what the scorer cannot)")
    args = parser.parse_args()
    servers = {"analysis at /complete": [*amaris(), "serve", "--no-early-analysis"],
               "analysis as rollouts arrive": [*amaris(), "serve"]}
    if args.baseline:
        servers = {"baseline": [*amaris(args.baseline), "serve"], **servers}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))}
    print(f"amaris serve, async mode, sim-judge latency {args.latency:g} s, {args.steps} steps of {args.rollouts} "
          f"rollouts ({args.concurrency} in flight), llm.concurrency {args.llm_concurrency}, {args.rounds} rounds "
          "interleaved", flush=True)
    figures: dict[str, tuple[list[float], list[float], list[int]]] = {name: ([], [], []) for name in servers}
    with process_url([*amaris(), "sim-judge", "--port", "0", "--latency", str(args.latency)],
                     r"OPENAI_BASE_URL=(\S+)", env) as judge:
        env.update(OPENAI_BASE_URL=judge, OPENAI_API_KEY="sim")
        for round_ in range(args.rounds):
            order = list(servers) if round_ % 2 == 0 else list(reversed(servers))
            for name in order:
                latencies, evolutions, analyzer_calls = one_round(servers[name], env, args.steps, args.rollouts,
                                                                  args.concurrency, args.llm_concurrency)
                figures[name][0].extend(latencies)
                figures[name][1].extend(evolutions)
                figures[name][2].append(analyzer_calls)
                print(f"  round {round_ + 1}, {name}: /complete to updated {' '.join(f'{x:.2f}' for x in evolutions)}",
                      flush=True)
    base = None
    for name, (latencies, evolutions, calls) in figures.items():
        p50, p95 = statistics.median(latencies), statistics.quantiles(latencies, n=20)[-1]
        evolution = statistics.median(evolutions)
        base = base or evolution
        print(f"{name:28} /score p50 {p50:.3f} s, p95 {p95:.3f} s; /complete to updated: median {evolution:.2f} s "
              f"({evolution / base:.2f} of the first); analyses found answered {statistics.median(calls):g} "
              f"of {args.steps * args.rollouts} per round", flush=True)


if __name__ == "__main__":
    main()
