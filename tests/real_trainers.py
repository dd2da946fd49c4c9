"""The real trainers' stack (torch, TRL, verl, OpenRLHF), imported by the test that needs it, not when pytest
collects its file: every xdist worker collects every file, and importing the stack costs each about 5 s of
CPU (measured: collection took 10.6 s of CPU with it, 5 s without). Tests that use it import `trainers`
(a module-scoped fixture that skips, with the reason, when a package is missing) and take one of two xdist
groups, so that two workers import it (one group would make the longest run of the suite)."""

from __future__ import annotations

from types import ModuleType

import pytest

IN_PROCESS_TRL = pytest.mark.xdist_group("real-trainers-trl")
OTHERS = pytest.mark.xdist_group("real-trainers-verl")  # verl's managers, and TRL in two processes of its own
REASON = "{} is not installed (.ci/run installs the real trainers)"


def require(*modules: str) -> list[ModuleType]:
    """Import each module or skip the test saying which is missing."""
    return [pytest.importorskip(name, reason=REASON.format(name.split(".")[0])) for name in modules]


@pytest.fixture(scope="module")
def trainers() -> ModuleType:
    """tests/tiny_trainers.py (the tiny model, tokenizer and verl batches), once torch, TRL and verl import."""
    require("torch", "trl", "verl")
    from tests import tiny_trainers

    return tiny_trainers
