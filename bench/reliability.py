"""Benchmark: what the judge reliability check costs a step, side by side with the same step without it.

One step of the 96 example rollouts (examples/math, all six files) is scored and evolved in fresh runs
with `reliability.enabled` off and on, interleaved, against the sim-judge in its own process at
`--latency` seconds per answer (a judge's latency is what the check adds to, so it is the bottleneck
here, as with a real judge). Printed: the median wall time of `amaris score` (the trainer's critical path:
the check must add nothing) and of `amaris evolve` (the check runs beside the analyses), both runs and
their ratio, and the extra scorer calls as counted in calls.jsonl against the step's own.

    python bench/reliability.py                    # 3 repetitions, 0.5 s judge latency
    python bench/reliability.py --reps 5 --latency 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AMARIS = [sys.executable, "-m", "amaris_cli"]
CONFIG = """
[[rubric.anchors]]
id = "correct-answer"
text = "The final answer is correct (it matches the reference answer)."
weight = 2.0

[[rubric.adaptive]]
id = "shows-reasoning"
text = "The response explains its reasoning step by step."
weight = 1.0

[agents.default]
model = "sim-judge"
"""


def start_judge(latency: float) -> tuple[subprocess.Popen[str], str]:
    judge = subprocess.Popen([*AMARIS, "sim-judge", "--port", "0", "--latency", str(latency)], stderr=subprocess.PIPE,
                             text=True, cwd=ROOT)
    assert judge.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"OPENAI_BASE_URL=(\S+)", judge.stderr.readline())
        if found:
            return judge, found.group(1)
    judge.kill()
    raise RuntimeError("the sim-judge did not start within 30 s")


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run([*AMARIS, *map(str, args)], env=env, capture_output=True, text=True, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"amaris {' '.join(map(str, args))}: exit {done.returncode}\n{done.stderr}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.5)
    options = parser.parse_args()
    judge, url = start_judge(options.latency)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))},
           "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "not-a-key"}
    figures: dict[str, dict[str, list[float]]] = {"off": {"score": [], "evolve": []}, "on": {"score": [], "evolve": []}}
    extra: list[tuple[int, int]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = [json.loads(line) for i in range(6)
                    for line in (ROOT / "examples/math" / f"step-{i:03d}.jsonl").read_text().splitlines()]
            rollouts = Path(tmp, "step.jsonl")
            rollouts.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "step"}) + "\n" for r in rows))
            for rep in range(options.reps):
                for arm in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                    config = Path(tmp, f"{arm}{rep}.toml")
                    config.write_text(CONFIG + ('[memory]\nembedding = "openai"\n') +
                                      ("[reliability]\nenabled = true\n" if arm == "on" else ""))
                    run = Path(tmp, f"{arm}{rep}")
                    timed(["init", run, "--config", config], env)
                    figures[arm]["score"].append(timed(["score", rollouts, "--run", run, "--step", "0"], env))
                    figures[arm]["evolve"].append(timed(["evolve", "--run", run, "--step", "0"], env))
                    if arm == "on":
                        lines = [json.loads(x) for x in (run / "calls.jsonl").read_text().splitlines()]
                        scorer = [x for x in lines if x["agent"] == "scorer"]
                        again = sum(x["context"].startswith("reliability:") for x in scorer)
                        extra.append((again, len(scorer) - again))
    finally:
        judge.terminate()
        judge.wait(10)
    print(f"| figure (96 rollouts, judge latency {options.latency:g} s, median of {options.reps}) | off | on | on/off |")
    print("|---|---|---|---|")
    for stage in ("score", "evolve"):
        off, on = statistics.median(figures["off"][stage]), statistics.median(figures["on"][stage])
        print(f"| `amaris {stage}` wall time | {off:.2f} s | {on:.2f} s | {on / off:.3f} |")
    again, own = extra[0]
    print(f"| scorer calls in calls.jsonl: the step's own, re-judgements | {own}, 0 | {own}, {again} | "
          f"{again / own:.3f} extra |")


if __name__ == "__main__":
    main()
