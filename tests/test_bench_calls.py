"""The benchmark's in-process calls into amaris still match amaris's functions.

bench/run.py measures some figures inside its own process, through amaris's functions rather than its
commands: the demo run of cases 3 and 5 (`loop_job`), case 4's steady loop steps (`open_session`,
`run_loop`), case 7's scoring (`score_step`). The options redesign changed all three signatures and those
cases failed before measuring anything, unnoticed for a round. Each call runs here once, on the smallest
input, against the sim-judge the bench starts (its own process); the figures themselves are the bench's.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from amaris_cli.rollouts import read_rollouts

ROOT = Path(__file__).resolve().parent.parent


def bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("amaris_bench_run", ROOT / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_in_process_calls_run(tmp_path: Path) -> None:
    bench = bench_module()
    with bench.sim_judge(0.0) as url:
        demo = bench.demo_run(tmp_path, url, steps="0:0")
        assert json.loads((demo / "steps" / "000000" / "stats.json").read_text())
        rollouts = [r.model_copy(update={"step": 0}) for r in read_rollouts(bench.EXAMPLES / "step-001.jsonl")][:4]
        assert bench.amaris_score(bench.new_run(tmp_path, "score", url, 8), rollouts) > 0
        cpu, wall, scoring = bench.loop_steady(tmp_path, "steady", url, 0, steps=2)
        assert cpu > 0 and wall > 0 and len(scoring) == 1
