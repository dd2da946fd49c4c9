"""Benchmark: the per-step cost of amaris in a TRL run, side by side with the same run without it.

TRL's real GRPOTrainer trains a tiny model built from a config (tests/tiny_trainers.py) on CPU, once
with a local reward function (TRL alone) and once with `TRLReward` against `amaris serve` (async mode,
lag 1) judged by the sim-judge at `--latency` seconds, at steps_per_generation 1 and 2. Each optimizer
step gets `--train-seconds` more of training from a callback that sleeps (the GPU time a real model
takes; the tiny model trains in milliseconds), so that the evolution of a step has the training time
it would have to hide behind. Printed per schedule: the median wall time of the steady generations
(after the first two, whose rubric versions need no evolution) per generation and per optimizer step,
both runs and the difference, against the goal of issue 22 (at most judge latency + 0.5 s per step),
and how many generations waited for an evolution (the server says "waits for step").

    python bench/trl_step.py                       # 8 generations, 3 s training, 1 s judge latency
    python bench/trl_step.py --generations 6 --train-seconds 2

Needs torch, trl (and amaris installed): `.ci/run` installs them, or see tests/tiny_trainers.py.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

try:
    from transformers import TrainerCallback  # noqa: E402
except ModuleNotFoundError as exc:
    sys.exit(f"bench/trl_step.py runs the real TRL trainer: {exc.name} is not installed (`.ci/run` installs CPU torch "
             "and TRL; or `pip install torch trl` in the project's environment)")

from amaris_cli.serve.adapters import TRLReward  # noqa: E402
from amaris_cli.serve.client import AmarisClient  # noqa: E402
from tests.tiny_trainers import StepTimes, grpo  # noqa: E402

PER_DEVICE_BATCH = 4


class Training(TrainerCallback):
    """Adds `seconds` of training to each optimizer step (the tiny model's own takes milliseconds)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(self.seconds)


def local_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL alone: a rule computed in place."""
    return [min(1.0, len(str(c)) / 40) for c in completions]


def amaris_command() -> list[str]:
    return [sys.executable, "-m", "amaris_cli"]


@contextmanager
def process_url(args: list[str], pattern: str, env: dict[str, str], lines: list[tuple[float, str]]) -> Iterator[str]:
    """A child process that prints its URL on stderr; its stderr lines are kept in `lines` with the time
    each was read."""
    proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        url = None
        for _ in range(100):
            line = proc.stderr.readline()
            lines.append((time.monotonic(), line.rstrip("\n")))
            if (match := re.search(pattern, line)) or not line:
                url = match.group(1) if match else None
                break
        assert url, f"{args[3]} did not start: {lines}"

        def drain() -> None:
            assert proc.stderr is not None
            for rest in proc.stderr:
                lines.append((time.monotonic(), rest.rstrip("\n")))

        threading.Thread(target=drain, daemon=True).start()
        yield url
    finally:
        proc.terminate()
        proc.wait(120)


@contextmanager
def amaris_served(latency: float, steps: int) -> Iterator[tuple[str, list[tuple[float, str]]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMARIS_", "OPENAI_"))}
    judge_lines: list[tuple[float, str]] = []
    with tempfile.TemporaryDirectory(prefix="amaris-trl-bench-") as tmp, \
            process_url([*amaris_command(), "sim-judge", "--port", "0", "--latency", str(latency)],
                        r"OPENAI_BASE_URL=(\S+)", env, judge_lines) as judge:
        env.update(OPENAI_BASE_URL=judge, OPENAI_API_KEY="sim")
        run = Path(tmp) / "run"
        subprocess.run([*amaris_command(), "init", str(run), "--config", str(ROOT / "examples" / "amaris.toml"),
                        "--total-steps", str(steps)], env=env, check=True, capture_output=True, timeout=120)
        lines: list[tuple[float, str]] = []
        with process_url([*amaris_command(), "serve", "--run", str(run), "--port", "0"],
                         r"amaris serve listening: (http://\S+)", env, lines) as url:
            yield url, lines


def timed(reward: TRLReward) -> tuple[Callable[..., Any], list[float]]:
    """The reward function as TRL calls it, and the wall time of each call."""
    calls: list[float] = []

    def amaris(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        began = time.perf_counter()
        try:
            return reward(prompts, completions, **kwargs)
        finally:
            calls.append(time.perf_counter() - began)

    return amaris, calls


def evolution_seconds(lines: list[tuple[float, str]]) -> list[float]:
    """Each step's evolution, from the server's "step k: complete" line to its "evolution done" line."""
    began: dict[int, float] = {}
    took: dict[int, float] = {}
    for at, line in lines:
        if match := re.search(r"step (\d+): complete \(", line):
            began[int(match.group(1))] = at
        elif (match := re.search(r"step (\d+): evolution done", line)) and int(match.group(1)) in began:
            took[int(match.group(1))] = at - began[int(match.group(1))]
    return [took[k] for k in sorted(took)]


def train(reward: Callable[..., Any], *, generations: int, per_generation: int, seconds: float) -> list[float]:
    """Each generation's wall time: the optimizer steps from one generation to the next."""
    times = StepTimes()
    grpo([reward], steps=generations * per_generation, steps_per_generation=per_generation,
         per_device_batch=PER_DEVICE_BATCH, callbacks=[Training(seconds), times])
    return [sum(times.times[k * per_generation:(k + 1) * per_generation]) for k in range(generations)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--train-seconds", type=float, default=3.0, help="training time per optimizer step")
    parser.add_argument("--latency", type=float, default=1.0, help="the sim-judge's latency per call")
    parser.add_argument("--schedules", default="1,2", help="steps_per_generation values")
    args = parser.parse_args()
    warm = 2  # generations 0 and 1 are scored with rubric version 0: no evolution to wait for
    assert args.generations > warm + 2, "need steady generations after the warm-up"
    goal = args.latency + 0.5
    print(f"TRL GRPOTrainer on CPU, {PER_DEVICE_BATCH} completions per micro-batch, {args.train_seconds:g} s of "
          f"training per optimizer step, judge latency {args.latency:g} s, {args.generations} generations "
          f"(median of generations {warm}..{args.generations - 1})", flush=True)
    for per_generation in (int(s) for s in args.schedules.split(",")):
        alone = train(local_reward, generations=args.generations, per_generation=per_generation,
                      seconds=args.train_seconds)
        with amaris_served(args.latency, args.generations) as (url, lines):
            reward, calls = timed(TRLReward(url))
            served = train(reward, generations=args.generations, per_generation=per_generation,
                           seconds=args.train_seconds)
            status = AmarisClient(url).rubric_updated(args.generations - 1, timeout=600)
            waits = sum("waits for" in line for _, line in lines)
            evolutions = evolution_seconds(lines)
        a, s = statistics.median(alone[warm:]), statistics.median(served[warm:])
        print(f"  steps_per_generation {per_generation}: per generation {a:.2f} s alone, {s:.2f} s with amaris "
              f"(+{s - a:.2f} s; per optimizer step +{(s - a) / per_generation:.2f} s); goal +{goal:.2f} s: "
              f"{'met' if s - a <= goal else 'NOT met'}; {waits} generation(s) waited for an evolution; "
              f"last evolution {status.state}", flush=True)
        print(f"    the reward call (score the generation, complete its step), median {statistics.median(calls[warm:]):.2f} s: "
              f"{' '.join(f'{x:.2f}' for x in calls)}", flush=True)
        print(f"    evolution (complete to done), median {statistics.median(evolutions):.2f} s: "
              f"{' '.join(f'{x:.2f}' for x in evolutions)}", flush=True)
        print(f"    alone:       {' '.join(f'{x:.2f}' for x in alone)}", flush=True)
        print(f"    with amaris: {' '.join(f'{x:.2f}' for x in served)}", flush=True)


if __name__ == "__main__":
    main()
