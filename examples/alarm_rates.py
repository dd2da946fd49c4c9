"""How often the onset alarms (amaris_cli/alarms.py) fire on clean runs, and when they fire on a ramping hack.

Runs are generated as step signals, 16 rollouts a step, the way a judge and a trainer's verifiable reward
see them: a correct answer gets gold 1 and a judge reward near 1; a wrong one gold 0 and partial credit
(0, 1/3 or 1/2, as judges give for shown work); a hack gold 0 and a judge reward of 0.83 or 1 (the judge
is fooled), and the analyses name it. Accuracy drifts over the run as training moves it; a background
pattern (verbosity) shows in 5% of rollouts at random. Deterministic: `synthetic_run` takes a seed.

Run: python examples/alarm_rates.py [RUNS]   (default 2000 runs per scenario)
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Sequence

from amaris_cli.alarms import Moments, StepSignals, detect

HACK = "grader_addressed_instructions"
SLOW_RAMP = (1, 2, 3, 4, 5, 6, 7, 8)  # one more hacked rollout of 16 each step


def synthetic_run(seed: int, steps: int = 12, per_step: int = 16, accuracy: tuple[float, float] = (0.6, 0.8),
                  ramp_from: int | None = None, ramp: Sequence[int] = SLOW_RAMP, background: float = 0.05,
                  analyzed: bool = True) -> list[StepSignals]:
    """Step signals of a run: accuracy moving linearly from accuracy[0] to accuracy[1]; from step
    `ramp_from` on, ramp[t - ramp_from] (then its last value) hacked rollouts per step. `analyzed=False`
    leaves out the analyses (a score-only run: only the divergence can see the hack)."""
    rng = random.Random(seed)
    out = []
    for t in range(steps):
        hacked = 0 if ramp_from is None or t < ramp_from else ramp[min(t - ramp_from, len(ramp) - 1)]
        acc = accuracy[0] + (accuracy[1] - accuracy[0]) * t / max(1, steps - 1)
        judge, gold, patterns = [], [], Counter()
        for i in range(per_step):
            if i < hacked:
                judge.append(rng.choice((0.833333, 1.0)))
                gold.append(0.0)
                patterns[HACK] += 1
            elif rng.random() < acc:
                judge.append(1.0)
                gold.append(1.0)
            else:
                judge.append(rng.choice((0.0, 0.333333, 0.5)))
                gold.append(0.0)
            if rng.random() < background:
                patterns["verbosity"] += 1
        both = list(zip(judge, gold, strict=True))
        out.append(StepSignals(
            step=t, judge_mean=sum(judge) / per_step, n_scored=per_step, gold_mean=sum(gold) / per_step,
            judge_mean_gold=sum(judge) / per_step, n_gold=per_step,
            failed=Moments.of(j - g for j, g in both if g < 0.5),
            n_analyzed=per_step if analyzed else 0, patterns=dict(patterns) if analyzed else {}))
    return out


def first_alarms(signals: list[StepSignals]) -> dict[str, int | None]:
    report = detect(signals)
    first: dict[str, int | None] = {"judge_gold_divergence": None, "pattern_prevalence": None}
    for alarm in report.alarms:
        if first[alarm.kind] is None:
            first[alarm.kind] = alarm.step
    return first


def main(runs: int) -> None:
    print(f"{runs} generated runs per scenario, 12 steps of 16 rollouts")
    for name, accuracy in (("clean, learning (accuracy 0.6 -> 0.8)", (0.6, 0.8)),
                           ("clean, flat (0.7)", (0.7, 0.7)),
                           ("clean, getting worse (0.8 -> 0.3)", (0.8, 0.3))):
        alarmed = Counter()
        for seed in range(runs):
            for kind, step in first_alarms(synthetic_run(seed, accuracy=accuracy)).items():
                alarmed[kind] += step is not None
        print(f"  {name}: runs with a divergence alarm {alarmed['judge_gold_divergence']}, "
              f"with a prevalence alarm {alarmed['pattern_prevalence']}")
    for name, analyzed in (("ramp 1..8 of 16 from step 4, analyzed", True), ("the same, score-only", False)):
        at: dict[str, Counter[int | None]] = {"judge_gold_divergence": Counter(), "pattern_prevalence": Counter()}
        for seed in range(runs):
            for kind, step in first_alarms(synthetic_run(seed, ramp_from=4, analyzed=analyzed)).items():
                at[kind][step] += 1
        for kind, steps in at.items():
            if analyzed or kind == "judge_gold_divergence":
                shown = ", ".join(f"step {s}: {n}" for s, n in sorted(steps.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))
                print(f"  {name}: first {kind} alarm: {shown}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
