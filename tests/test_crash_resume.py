"""Killing `loop` with SIGKILL at random points and re-running it gives the uninterrupted result."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amaris_cli.simjudge.server import SimJudge, SimJudgeConfig
from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env, outputs, process_env

TRIALS = 20
CHUNKS = 4
STEPS = "0:1"


@pytest.fixture(scope="module")
def judge() -> Iterator[SimJudge]:
    sim = SimJudge(SimJudgeConfig(latency=0.002)).start_in_thread()
    yield sim
    sim.stop()


def _config(directory: Path) -> Path:
    config = directory / "c.toml"
    config.write_text(TEST_CONFIG)
    return config


def _loop_process(run: Path, judge: SimJudge) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "amaris_cli", "loop", str(EXAMPLES / "math"), "--run", str(run),
                             "--steps", STEPS, "--rescore", "--quiet"], env=process_env(judge),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# The trials in chunks, so that the test's processes run side by side under pytest-xdist.
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_sigkill_at_random_points_then_resume_equals_an_uninterrupted_run(
        tmp_path: Path, judge: SimJudge, chunk: int) -> None:
    config = _config(tmp_path)
    # The uninterrupted run, in this chunk: the kill points range over the time a loop takes now, beside
    # whatever else this machine runs (a reference timed under another load left most of them after the end).
    reference = tmp_path / "reference"
    assert invoke("init", reference, "--config", config).exit_code == 0
    started = time.monotonic()
    assert _loop_process(reference, judge).wait(120) == 0
    full_time = time.monotonic() - started
    expected = outputs(reference)
    assert any(k.endswith("update.json") for k in expected)
    trials = range(chunk * TRIALS // CHUNKS, (chunk + 1) * TRIALS // CHUNKS)
    killed = 0
    for trial in trials:
        rng = random.Random(20261122 + trial)
        run = tmp_path / f"trial-{trial}"
        assert invoke("init", run, "--config", config).exit_code == 0
        started = time.monotonic()
        proc = _loop_process(run, judge)
        kill_at = started + rng.uniform(0.05 / full_time, 1.0) * full_time  # a random point of the loop
        while proc.poll() is None and time.monotonic() < kill_at:
            time.sleep(0.01)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        else:  # the loop runs faster now than when it was timed (the machine's load fell): time the next ones by it
            full_time = time.monotonic() - started
        proc.wait(30)
        resumed = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", STEPS, "--rescore", "--quiet",
                         env=judge_env(judge))
        assert resumed.exit_code == 0, f"trial {trial}: {resumed.stderr}"
        got = outputs(run)
        assert got.keys() == expected.keys(), f"trial {trial}: files differ: {set(got) ^ set(expected)}"
        for name, data in expected.items():
            assert got[name] == data, f"trial {trial}: {name} differs after resume"
        assert not list((run / "steps").rglob(".*journal*")), f"trial {trial}: a journal was left behind"
    assert killed >= len(trials) // 2, "most trials must actually interrupt the loop"
