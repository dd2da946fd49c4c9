"""Shared test tooling: a real sim-judge HTTP server on 127.0.0.1 and the real CLI.

Nothing here mocks the openai SDK or HTTP: commands run in-process through typer's runner and
talk to the sim-judge over loopback through the real SDK.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.testing
from typer.testing import CliRunner

from amaris_cli.cli import app
from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from tests.real_trainers import tiny_models, trainers  # noqa: F401  (a fixture: the real trainers, for the tests that use them)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PLANTED_KEY = "sk-amaris-test-PLANTED-4f9c2e7d1b"  # a fake key that must never reach a file

TEST_CONFIG = """
[training]
goal = "arithmetic word problems"
total_steps = 6

[rubric]
max_adaptive = 6

[[rubric.anchors]]
id = "correct-answer"
text = "The final answer is correct (it matches the reference answer)."
weight = 2.0

[[rubric.adaptive]]
id = "shows-reasoning"
text = "The response explains its reasoning step by step."
weight = 1.0

[pipeline]
chunk_size = 8

[llm]
retry_base_delay = 0.01
retry_max_delay = 0.05
# The suite's judges fail on purpose, request by request: no outage wait (tests/test_outage.py tests it).
outage_budget = 0

[agents.default]
model = "judge-model"
timeout = 5
max_attempts = 4
"""

# The sim-judge's /v1/embeddings instead of the local model: where the scenario, not the embedder, is tested.
# Its vectors are hashed bags of words, so retrieval still finds a recurring failure by its words. Most tests keep
# the default, the local model (and every process its load and threads can break: test_crash_resume, test_online);
# those of the model's semantics must (test_retrieval_quality, test_memory_decisions, test_embedding_cache).
FAST_MEMORY = '\n[memory]\nembedding = "openai"\nembedding_model = "hash-embed"\n'
# A right answer the sim-judge scores 1 on every scenario criterion: a reply of only 1s, which the judge scale check asks
# about (agents/scalecheck.py).
WORKED_ROW = {"id": "worked", "input": "What is 6*7?",
              "output": "Six groups of seven: five sevens make thirty five, and one more seven adds seven, which brings "
                        "the total to forty two, as the multiplication table also says.\nFinal answer: 42",
              "answer": "42"}


# Every test's runs share one embedding cache (amaris_cli/memory/embedcache.py): a vector depends on its text
# alone, so a cached vector is the one the model would give, and the suite embeds each text once instead of
# in every run that writes it (a third of the suite's CPU was the model). Tests of the cache use their own.
# AMARIS_EVENT_LOOP too: the loop asked for (amaris_cli/eventloop.py) runs the commands the suite runs.
KEPT_ENV = ("AMARIS_EMBEDDING_CACHE", "AMARIS_CACHE_DIR", "AMARIS_EVENT_LOOP")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment less its AMARIS_*/OPENAI_* variables (those in KEPT_ENV stay), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k in KEPT_ENV or not k.startswith(("AMARIS_", "OPENAI_"))}
    env.update(extra)
    return env


SESSION_CACHES = {"AMARIS_EMBEDDING_CACHE": "amaris-embeddings-", "AMARIS_CACHE_DIR": "amaris-cache-"}


def pytest_configure(config: pytest.Config) -> None:
    """One embedding cache and one id memo (plainids.py) per session, made by the controller (xdist's workers inherit
    its environment): the model's code may have changed since the last session, and the suite writes no user's
    ~/.cache."""
    if hasattr(config, "workerinput"):
        return
    config.amaris_session_caches = [variable for variable in SESSION_CACHES if variable not in os.environ]  # type: ignore[attr-defined]
    for variable in config.amaris_session_caches:  # type: ignore[attr-defined]
        os.environ[variable] = tempfile.mkdtemp(prefix=SESSION_CACHES[variable])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With TEST_CPU_LOG=FILE, append each test's CPU to FILE (bench/suite_cpu.py sums it): the suite is bound by
    CPU on 2 cores, which --durations (wall time) does not show. Children count once waited for."""
    log = os.environ.get("TEST_CPU_LOG")
    before, started = os.times(), time.monotonic()
    yield
    if log:
        after = os.times()
        own = after.user + after.system - before.user - before.system
        children = (after.children_user + after.children_system - before.children_user - before.children_system)
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps({"test": item.nodeid, "cpu": round(own, 3), "children_cpu": round(children, 3),
                                  "wall": round(time.monotonic() - started, 3)}) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    for variable in getattr(config, "amaris_session_caches", []):
        shutil.rmtree(os.environ.pop(variable), ignore_errors=True)


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def sim_factory() -> Iterator[Callable[..., SimJudge]]:
    started: list[SimJudge] = []

    def make(**config: object) -> SimJudge:
        judge = SimJudge(SimJudgeConfig(**config)).start_in_thread()  # type: ignore[arg-type]
        judge.keep_requests = True
        started.append(judge)
        return judge

    yield make
    for judge in started:
        judge.stop()


@pytest.fixture(scope="module")
def judge() -> Iterator[SimJudge]:
    """One sim-judge for a whole test module (its requests are not kept: see `sim_factory`)."""
    sim = SimJudge(SimJudgeConfig()).start_in_thread()
    yield sim
    sim.stop()


@pytest.fixture
def sim(sim_factory: Callable[..., SimJudge]) -> SimJudge:
    return sim_factory()


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "amaris.toml"
    path.write_text(TEST_CONFIG)
    return path


def judge_env(judge: SimJudge, **extra: str) -> dict[str, str]:
    env = {"OPENAI_BASE_URL": judge.base_url, "OPENAI_API_KEY": PLANTED_KEY}
    env.update(extra)
    return env


# typer's CliRunner builds the app's click command again on every invoke (30 ms of CPU, most of an error
# case's invoke); the command is the same object each time, as in an `amaris` process, which builds it once.
typer.testing._get_command = functools.cache(typer.testing._get_command)


def invoke(*args: object, env: dict[str, str] | None = None) -> Result:
    """Run the real CLI in-process with exactly the AMARIS_*/OPENAI_* variables given."""
    clean = {k: None for k in os.environ if k not in KEPT_ENV and k.startswith(("AMARIS_", "OPENAI_"))}
    result = CliRunner().invoke(app, [str(a) for a in args], env={**clean, **(env or {})}, catch_exceptions=False)
    return Result(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def run_cli() -> Callable[..., Result]:
    return invoke


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under a directory with its bytes (the lock file excepted)."""
    files: dict[str, bytes] = {}
    for p in sorted(directory.rglob("*")):
        if p.name == ".lock" or not p.is_file():
            continue
        try:
            files[str(p.relative_to(directory))] = p.read_bytes()
        except FileNotFoundError:  # a store's temporary file, gone between listing and reading
            continue
    return files


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chat_text(*messages: dict) -> str:
    """A chat as amaris shows it to the judge, written here by hand: a JSON list, one compact message a line."""
    return "[\n" + ",\n".join(json.dumps(m, separators=(",", ":"), ensure_ascii=False) for m in messages) + "\n]"


def last_said(shown: str) -> str:
    """The text of a shown input's last message (the question), or the input itself when it was text."""
    return json.loads(shown)[-1]["content"] if shown.startswith("[\n{") else shown


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def new_run(tmp: Path, name: str = "run", extra: str = "", base: str = TEST_CONFIG) -> Path:
    """`amaris init TMP/NAME` with the test config (plus `extra` TOML)."""
    config = tmp / f"{name}.toml"
    config.write_text(base + extra)
    run = tmp / name
    result = invoke("init", run, "--config", config)
    assert result.exit_code == 0, result.stderr
    return run


def new_scenario_run(tmp: Path, name: str = "run", extra: str = "") -> Path:
    """`new_run` with the sim-judge's embeddings (FAST_MEMORY): for tests of a scenario, not of the embedder."""
    return new_run(tmp, name, extra, TEST_CONFIG + FAST_MEMORY)


def calls(run: Path) -> list[dict]:
    """The run's calls.jsonl, line by line."""
    return read_jsonl(run / "calls.jsonl")


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def scores(run: Path, step: int = 0, name: str = "scores") -> dict[str, dict]:
    """A step's scores.jsonl (or `name`.jsonl: rescores) by rollout id."""
    return {r["rollout_id"]: r for r in read_jsonl(run / "steps" / f"{step:06d}" / f"{name}.jsonl")}


def evolution(run: Path, step: int = 0) -> dict | None:
    """What a step's provenance.json says of its evolution (None: not evolved)."""
    return read_json(run / "steps" / f"{step:06d}" / "provenance.json")["evolution"]


def outputs(run: Path) -> dict[str, bytes]:
    """The run's step and rubric files (what a reproduction must equal)."""
    return {str(p.relative_to(run)): p.read_bytes() for sub in ("steps", "rubrics") for p in sorted((run / sub).rglob("*"))
            if p.is_file()}


def step_file(step: int) -> Path:
    """The example rollouts of a step (examples/math)."""
    return EXAMPLES / "math" / f"step-{step:03d}.jsonl"


def load_example(name: str):
    """A shipped script of examples/ (not a package) as a module, loaded by path."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def process_env(judge) -> dict[str, str]:
    """The environment of a real `amaris` subprocess against `judge`: this one's, less its AMARIS_*/OPENAI_*."""
    return clean_env(**judge_env(judge))


def free_port() -> int:
    """A port nothing listens on now (a judge to start there later, or one that stays down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_signals(sigint: signal.Handlers = signal.SIG_DFL) -> Callable[[], None]:
    """A child's `preexec_fn`: SIGTERM at its default and SIGINT as given, whatever this process's are (a job a script
    starts with `&` ignores SIGINT, and its children inherit that)."""

    def reset() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, sigint)

    return reset


def steps_read(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    """The steps `module.name(run, step, ...)` is called for from now on (a count of reads that must not grow)."""
    steps: list[int] = []
    original = getattr(module, name)

    def counted(run: object, step: int, *args: object, **kwargs: object) -> object:
        steps.append(step)
        return original(run, step, *args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return steps


def wait_until(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class read_only_copy:
    """A copy of `src` at `dst` that nobody can write: a read-only bind mount as root (root ignores file
    modes), else files and directories without write permission."""

    def __init__(self, src: Path, dst: Path) -> None:
        self.src, self.dst = src, dst
        self.mounted = False

    def __enter__(self) -> Path:
        shutil.copytree(self.src, self.dst)
        if os.geteuid() == 0:
            bind = subprocess.run(["mount", "--bind", "-o", "ro", str(self.dst), str(self.dst)], capture_output=True)
            if bind.returncode != 0:
                pytest.skip(f"cannot make a read-only view as root here (mount --bind -o ro: {bind.stderr.decode().strip()})")
            self.mounted = True
        else:
            for path in [self.dst, *self.dst.rglob("*")]:
                path.chmod(path.stat().st_mode & ~0o222)
        probe = self.dst / ".probe"
        with pytest.raises(OSError):
            probe.write_text("x")
        return self.dst

    def __exit__(self, *exc: object) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.dst)], check=True)
        else:
            for path in [self.dst, *self.dst.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)
