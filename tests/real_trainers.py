"""The real trainers' stack (torch, TRL, verl, OpenRLHF), imported by the test that needs it, not when pytest
collects its file: every xdist worker collects every file, and importing the stack costs each about 5 s of
CPU (measured: collection took 10.6 s of CPU per worker with it, 3.7 s without). Tests that use it take the fixture
`trainers`, or `tiny_models` for the tokenizer and model alone (module-scoped; each skips, with the reason,
when a package is missing), and one of two xdist groups, so that two workers import it (one group would
make the longest run of the suite)."""

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
def tiny_models() -> ModuleType:
    """tests/tiny_trainers.py for its tokenizer and model alone, once torch, transformers and datasets import."""
    require("torch", "transformers", "datasets")
    from tests import tiny_trainers

    return tiny_trainers


@pytest.fixture(scope="module")
def trainers(tiny_models: ModuleType) -> ModuleType:
    """tests/tiny_trainers.py (the tiny model, tokenizer, TRL trainings and verl batches), once TRL and verl
    import too."""
    require("trl", "verl")
    return tiny_models
