"""The event loop amaris's commands run on (amaris_cli/eventloop.py)."""

from __future__ import annotations

import asyncio

import pytest

from amaris_cli import eventloop
from amaris_cli.session import Session

uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed here (amaris declares it except on Windows)")


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_commands_run_on_uvloop_unless_asked_for_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMARIS_EVENT_LOOP", raising=False)
    assert eventloop.run(_loop_module()).startswith("uvloop")
    monkeypatch.setenv("AMARIS_EVENT_LOOP", "asyncio")
    assert eventloop.run(_loop_module()).startswith("asyncio")


def test_a_session_runs_its_stages_on_the_one_loop_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Session.execute` (every command's stages) goes through eventloop.run, as `amaris serve` does."""

    class Client:
        async def aclose(self) -> None:
            pass

    monkeypatch.delenv("AMARIS_EVENT_LOOP", raising=False)
    session = Session.__new__(Session)
    session.client = Client()  # type: ignore[assignment]
    assert session.execute(_loop_module()).startswith("uvloop")


def test_a_stopped_sim_judge_leaves_no_file_open() -> None:
    """The sim-judge a session starts when no endpoint is configured (and every test's) runs its own loop in a
    thread, which stop() left unclosed: asyncio's loop closes itself when collected, uvloop's never does, so each
    sim-judge kept six file descriptors (126 after 20 judges, the listening sockets among them)."""
    import gc
    import os

    import openai

    from amaris_cli.simjudge.server import SimJudge

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd here")
    messages = [{"role": "user", "content": "Is 2 + 2 = 4?"}]
    with SimJudge() as judge:  # the first: what the process opens once (the SDK's imports)
        openai.OpenAI(base_url=judge.base_url, api_key="unused", max_retries=0).chat.completions.create(
            model="sim", messages=messages)  # type: ignore[arg-type]
    gc.collect()
    before = open_files()
    for _ in range(10):
        with SimJudge() as judge, openai.OpenAI(base_url=judge.base_url, api_key="unused", max_retries=0) as client:
            client.chat.completions.create(model="sim", messages=messages)  # type: ignore[arg-type]
    gc.collect()
    assert open_files() - before <= 2, open_files() - before


def test_a_command_called_inside_a_running_event_loop_says_so_as_asyncio_run_did() -> None:
    """A job called from a coroutine (a trainer's async reward function calling `score_job`) cannot run its own
    loop. asyncio.run said so at once; the runner opened as a context manager made its loop first, and its close
    then failed too: "Cannot run the event loop while another loop is running", raised while handling the first,
    with "coroutine 'Loop.shutdown_asyncgens' was never awaited"."""
    import gc
    import warnings

    async def inside() -> None:
        session = Session.__new__(Session)
        session.execute(_loop_module())

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="cannot be called from a running event loop") as raised:
            asyncio.run(inside())
        context = raised.value.__context__
        del raised  # its traceback holds the coroutines never awaited: their warnings are said here, not later
        gc.collect()
    assert context is None, repr(context)
    assert not [w for w in said if "shutdown_asyncgens" in str(w.message)], [str(w.message) for w in said]


def test_the_suites_commands_keep_the_loop_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """`AMARIS_EVENT_LOOP=asyncio pytest ...` tells a loop's fault from amaris's own, but the suite's helpers (invoke,
    clean_env: every `amaris serve` and worker it starts) dropped every AMARIS_* variable: its commands ran on
    uvloop whatever the variable said, and only the sim-judges took asyncio's loop."""
    import subprocess
    import sys

    from tests.conftest import clean_env

    monkeypatch.setenv("AMARIS_EVENT_LOOP", "asyncio")
    program = ("import asyncio; from amaris_cli import eventloop\n"
               "async def main(): return type(asyncio.get_running_loop()).__module__\n"
               "print(eventloop.run(main()))")
    done = subprocess.run([sys.executable, "-c", program], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("asyncio"), (done.stdout, done.stderr)
