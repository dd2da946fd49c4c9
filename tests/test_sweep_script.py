"""The shipped ablation sweep script runs end to end, reports calls made vs reused, and shows memory on against off;
it resumes an interrupted sweep instead of deleting it, never deletes a directory it did not make, and checks its
arguments before the arms run (it did `rm -rf "$OUT"` first, then each command in turn)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, clean_env, judge_env


def _sweep(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "examples/ablation_sweep.sh", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)


def test_ablation_sweep_script(tmp_path: Path, sim) -> None:
    # The example's first 4 steps: the memory's pitfall comes at step 2 and scores step 3 lower (the suite's
    # longest test ran all 8 steps in 4 arms; `make demo` runs them)
    steps = tmp_path / "recurring"
    steps.mkdir()
    for step in range(4):
        shutil.copy(ROOT / "examples" / "recurring" / f"step-{step:03d}.jsonl", steps)
    env = clean_env()
    out = tmp_path / "sweep"
    env.update(judge_env(sim), AMARIS=f"{sys.executable} -m amaris_cli", JUDGE="endpoint", OUT=str(out),
               INPUT=str(steps))

    # A directory that holds something else is neither written into nor deleted.
    mine = tmp_path / "runs"
    (mine / "precious").mkdir(parents=True)
    (mine / "precious" / "notes.txt").write_text("keep")
    done = _sweep({**env, "OUT": str(mine)})
    assert done.returncode == 2 and "not a sweep's output" in done.stderr, done.stderr
    assert [p.name for p in mine.iterdir()] == ["precious"] and sim.stats["requests"] == 0
    # A typo in compare's arguments is found before any arm runs.
    done = _sweep(env, "--jsn")
    assert done.returncode == 2 and not out.exists() and sim.stats["requests"] == 0, done.stderr

    done = _sweep(env, "--json")
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

    # Interrupted before its last arm, the same command makes only that arm again: the judge is not asked again.
    logs = {arm: (out / arm / "calls.jsonl").read_bytes() for arm in runs}
    shutil.rmtree(out / "no-memory")
    asked = sim.stats["requests"]
    done = _sweep(env, "--json")
    assert done.returncode == 0 and "resuming the sweep" in done.stderr, done.stderr
    assert {Path(r["run"]).name: r for r in json.loads(done.stdout)["runs"]} == runs
    for arm in ("full", "static-only", "dynamic-only"):
        assert (out / arm / "calls.jsonl").read_bytes() == logs[arm]
    assert sim.stats["requests"] - asked == runs["no-memory"]["calls_made"] < runs["full"]["calls_made"]
