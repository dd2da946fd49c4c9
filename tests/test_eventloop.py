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
