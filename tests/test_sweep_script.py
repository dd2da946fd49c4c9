"""The shipped ablation sweep script runs end to end, reports calls made vs reused, and shows memory on against off."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, clean_env, judge_env


def test_ablation_sweep_script(tmp_path: Path, sim) -> None:
    # The example's first 4 steps: the memory's pitfall comes at step 2 and scores step 3 lower (the suite's
    # longest test ran all 8 steps in 4 arms; `make demo` runs them)
    steps = tmp_path / "recurring"
    steps.mkdir()
    for step in range(4):
        shutil.copy(ROOT / "examples" / "recurring" / f"step-{step:03d}.jsonl", steps)
    env = clean_env()
    env.update(judge_env(sim), AMARIS=f"{sys.executable} -m amaris_cli", JUDGE="endpoint", OUT=str(tmp_path / "sweep"),
               INPUT=str(steps))
    done = subprocess.run(["bash", "examples/ablation_sweep.sh", "--json"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    runs = {Path(r["run"]).name: r for r in json.loads(done.stdout)["runs"]}
    assert set(runs) == {"full", "static-only", "dynamic-only", "no-memory"}
    assert runs["full"]["calls_reused"] == 0
    for name in ("static-only", "dynamic-only", "no-memory"):
        assert runs[name]["calls_reused"] > 0 and runs[name]["calls_made"] > 0
        assert runs[name]["mean_reward"]["0"] == runs["full"]["mean_reward"]["0"]
    # examples/recurring: a hack at 1 of 16 in every step, answered only by the arms that read the memory
    for name in ("static-only", "dynamic-only"):
        assert runs[name]["calls_reused"] > runs[name]["calls_made"]
        assert runs[name]["mean_reward"] == runs["full"]["mean_reward"]
    last = max(runs["full"]["mean_reward"], key=int)
    assert runs["no-memory"]["mean_reward"][last] > runs["full"]["mean_reward"][last]
    assert runs["no-memory"]["final_rubric_size"] < runs["full"]["final_rubric_size"]
