"""Killing `loop` with SIGKILL at random points and re-running it gives the uninterrupted result."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import EXAMPLES, TEST_CONFIG, invoke, judge_env

TRIALS = 20
STEPS = "0:1"


def outputs(run: Path) -> dict[str, bytes]:
    found = {}
    for sub in ("steps", "rubrics"):
        for p in sorted((run / sub).rglob("*")):
            if p.is_file():
                found[str(p.relative_to(run))] = p.read_bytes()
    return found


def test_sigkill_at_random_points_then_resume_equals_an_uninterrupted_run(tmp_path: Path, sim_factory) -> None:
    judge = sim_factory(latency=0.002)
    config = tmp_path / "c.toml"
    config.write_text(TEST_CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))}
    env.update(judge_env(judge))

    def loop_process(run: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "amaris_cli", "loop", str(EXAMPLES / "math"), "--run", str(run),
                                 "--steps", STEPS, "--rescore", "--quiet"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    reference = tmp_path / "reference"
    assert invoke("init", reference, "--config", config).exit_code == 0
    started = time.monotonic()
    assert loop_process(reference).wait(120) == 0
    full_time = time.monotonic() - started
    expected = outputs(reference)
    assert any(k.endswith("update.json") for k in expected)

    rng = random.Random(20261122)
    killed = 0
    for trial in range(TRIALS):
        run = tmp_path / f"trial-{trial}"
        assert invoke("init", run, "--config", config).exit_code == 0
        proc = loop_process(run)
        time.sleep(rng.uniform(0.05, full_time))
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        proc.wait(30)
        resumed = invoke("loop", EXAMPLES / "math", "--run", run, "--steps", STEPS, "--rescore", "--quiet", env=judge_env(judge))
        assert resumed.exit_code == 0, f"trial {trial}: {resumed.stderr}"
        got = outputs(run)
        assert got.keys() == expected.keys(), f"trial {trial}: files differ: {set(got) ^ set(expected)}"
        for name, data in expected.items():
            assert got[name] == data, f"trial {trial}: {name} differs after resume"
        assert not list((run / "steps").rglob(".*journal*")), f"trial {trial}: a journal was left behind"
    assert killed >= TRIALS // 2, "most trials must actually interrupt the loop"
