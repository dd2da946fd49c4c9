"""One loop step of 10,000 rollouts against the sim-judge: it must complete with bounded memory.

    python bench/scale.py [--rollouts 10000]

Prints the wall time of each stage and the process's RSS after it (and the peak), so growth with
the number of rollouts is visible. The sim-judge runs as a separate process on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import example_rollouts, new_run, run_session, sim_judge  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollouts", type=int, default=10_000)
    args = parser.parse_args()
    from amaris_cli.jobs import Hooks
    from amaris_cli.memory.store import MemoryStore
    from amaris_cli.rundir import RunDir
    from amaris_cli.stages.loop import StepPlan, run_loop

    tmp = Path(tempfile.mkdtemp(prefix="amaris-scale-"))
    rollouts = example_rollouts(args.rollouts)
    print(f"{args.rollouts} rollouts in one step; scratch {tmp}; RSS at start {rss_mb():.0f} MB", flush=True)
    with sim_judge(0.0) as url:
        run = RunDir(new_run(tmp, "scale", url, 64))
        marks: list[tuple[str, float, float]] = []
        with run_session(run, {"pipeline": {"on_error": "skip"}}) as session, \
                MemoryStore.open(run, session.settings.memory) as memory:

            def on_stage(stage: str, step: int) -> None:
                marks.append((stage, time.perf_counter(), rss_mb()))
                print(f"  start {stage:<9} RSS {rss_mb():.0f} MB", flush=True)

            started = time.perf_counter()
            reports = session.execute(run_loop(session, {0: StepPlan(rollouts)}, memory, hooks=Hooks(on_stage=on_stage)))
            wall = time.perf_counter() - started
            counts = memory.counts()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    marks.append(("end", started + wall, rss_mb()))
    for (stage, t0, _), (_, t1, rss) in zip(marks, marks[1:], strict=False):
        print(f"{stage:<10} {t1 - t0:7.1f} s   RSS after {rss:6.0f} MB")
    r = reports[0]
    print(f"mean reward {r.mean_reward}, failed {r.failed}, strategy {r.strategy}; memory {counts}")
    print(f"total {wall:.0f} s; peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
