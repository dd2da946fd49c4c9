"""Hacking-onset alarms: signs in a run's files that a policy has started to game its judge.

Two signals are followed per step (CHERRL, arXiv 2606.04923, finds the onset of hacking in training
logs as a reward that rises while gold signals stay flat or fall):

- `judge_gold_divergence`, when rollouts carry a verifiable reward (`gold_reward` in the rollout or its
  metadata, or `--map gold_reward=PATH`; `rollouts.jsonl` keeps it as `metadata.gold_reward`): the judge's
  reward for the rollouts the verifiable reward fails (gold < 0.5), less their gold. A hack that fools
  the judge brings failed rollouts high judge rewards, so this rises while the verifiable reward does not
  rise with it. A policy that merely gets worse has more failed rollouts, each credited as before, so it
  does not move; nor does a policy that gets better. (The plain gap judge - gold over all rollouts would
  rise for a worse policy too, wherever the judge gives wrong answers partial credit.)
- `pattern_prevalence`, always (from `summary.json` `hacking`): for each pattern the analyses name, the
  share of analyzed rollouts that show it.

The rule is the same for both. At step t the *window* is the last 3 steps with data (WINDOW) and the
*baseline* the up to 8 steps with data before it (at least 2, so the first check is at the 5th step).
An alarm is raised at t when all of these hold:
  1. window - baseline >= 0.1 (MIN_EFFECT), each pooled over the rollouts of its steps;
  2. step t alone is also >= 0.1 above the baseline (the rise is present now, not a spike that passed);
  3. the window holds >= 10 rollouts and the baseline >= 20 (failed ones, for the divergence);
  4. z >= 3 (MIN_Z), one-sided: for the divergence a difference of means whose standard error is the one
     "nothing changed" gives (both sides spread as the baseline does: a hack's own values would otherwise
     widen the window's spread and hide it); for a share, the two-proportion test with the pooled share,
     so a baseline at 0 does not make a blip of two rollouts significant.
One alarm covers the consecutive steps where the rule holds; after a step without it, it can fire again.

Why these numbers: 0.1 is the per-step share at which one step's evidence calls for a pitfall, and about
what two fully fooled rollouts of 16 add to a step's mean reward; smaller rises are within what sampling
and rubric edits move. Three steps are pooled because one step of 16 rollouts moves a share by 1/16 at
random, and a longer window reports a ramp late. The minimum counts keep a step with two or three failed
rollouts from deciding alone. z >= 3 (0.13% one-sided per check) because a run is checked at every step
for every pattern. Measured on generated runs (examples/alarm_rates.py: 2,000 runs per scenario, 12 steps
of 16 rollouts, judges giving wrong answers 0, 1/3 or 1/2 credit, a background pattern in 5% of rollouts):
clean runs alarm in 0.1-0.5% (divergence) and 0.6% (prevalence, on the background pattern), a policy
whose accuracy falls from 0.8 to 0.3 included; a hack ramping by one rollout a step from 1 of 16 at step 4
is named by the prevalence at step 7 in every run, and by the divergence alone (a score-only run, no
analyses) by step 8 in 97% of runs, mostly at step 6. tests/test_alarms.py proves the onset and the clean
runs on runs built by the real pipeline with the sim-judge.

Alarms only report: no reward, score or rubric is changed by one. Reading a run takes no lock and writes
nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

if TYPE_CHECKING:  # the records below are imported by serve's API (the trainer side): it stays light
    from amaris_cli.filehashes import Status
    from amaris_cli.reader import RunReader
    from amaris_cli.rundir import RunDir

WINDOW = 3
MIN_BASELINE = 2
MAX_BASELINE = 8
MIN_EFFECT = 0.1
MIN_Z = 3.0
READ_BACK = 4 * (WINDOW + MAX_BASELINE + 1)  # the most steps a command reads back for the alarms it says
MIN_WINDOW_ROLLOUTS = 10  # rollouts behind the window's value (failed ones, for the divergence)
MIN_BASELINE_ROLLOUTS = 20
FAILED_BELOW = 0.5  # a verifiable reward below this fails the rollout
GOLD_FIELD = "gold_reward"

AlarmKind = Literal["judge_gold_divergence", "pattern_prevalence"]


class Moments(BaseModel):
    """Count, mean and sum of squared deviations of per-rollout values (pooled exactly across steps)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> Moments:
        out = cls()
        for v in values:
            out = out.plus(cls(n=1, mean=v))
        return out

    @classmethod
    def share(cls, count: int, n: int) -> Moments:
        """The moments of n indicators of which `count` are 1."""
        if n == 0:
            return cls()
        p = count / n
        return cls(n=n, mean=p, m2=count * (1 - p) ** 2 + (n - count) * p * p)

    def plus(self, other: Moments) -> Moments:
        n = self.n + other.n
        if n == 0:
            return Moments()
        delta = other.mean - self.mean
        return Moments(n=n, mean=self.mean + delta * other.n / n,
                       m2=self.m2 + other.m2 + delta * delta * self.n * other.n / n)

    @property
    def variance(self) -> float:
        return self.m2 / (self.n - 1) if self.n > 1 else 0.0


class StepSignals(BaseModel):
    """What one step shows: the judge's and the verifiable rewards, and each pattern's count."""

    step: int
    judge_mean: float | None = None  # over the scored rollouts
    n_scored: int = 0
    gold_mean: float | None = None  # over the scored rollouts that carry a verifiable reward
    judge_mean_gold: float | None = None  # the judge's mean over those same rollouts
    n_gold: int = 0
    n_gold_out_of_range: int = 0  # verifiable rewards outside [0, 1], not comparable with the judge's
    failed: Moments = Field(default_factory=Moments)  # judge - gold over the rollouts with gold < 0.5
    n_analyzed: int = 0
    patterns: dict[str, int] = Field(default_factory=dict)  # pattern -> analyzed rollouts showing it


class AlarmEvidence(BaseModel):
    window_steps: list[int]
    baseline_steps: list[int]
    window_value: float  # the judge's excess on failed rollouts, or the pattern's share, over the window
    baseline_value: float
    current_value: float  # the same at the alarm's step alone
    effect: float  # window_value - baseline_value
    z: float  # 1e9 when the baseline did not vary at all
    n_window: int  # rollouts behind window_value (failed ones for the divergence, analyzed for a share)
    n_baseline: int
    judge_window: float | None = None  # divergence: the mean rewards of the rollouts with a verifiable reward
    judge_baseline: float | None = None
    gold_window: float | None = None
    gold_baseline: float | None = None


class Alarm(BaseModel):
    step: int
    kind: AlarmKind
    pattern: str | None = None
    reason: str
    evidence: AlarmEvidence


class AlarmReport(BaseModel):
    steps: list[StepSignals]
    alarms: list[Alarm]
    gold: bool  # whether the rollouts carry a verifiable reward the divergence could use
    notes: list[str] = Field(default_factory=list)


# --- reading a run ------------------------------------------------------------------------------


def gold_of(metadata: dict[str, object]) -> float | None:
    value = metadata.get(GOLD_FIELD)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None  # the rollout reader lets only finite numbers through; anything else is absent
    return float(value)


def step_signals(reader: RunReader, step: int) -> StepSignals:
    """The signals of one step from its files (scores.jsonl, rollouts.jsonl, summary.json); a file not
    written yet leaves its part empty."""
    from amaris_cli import artifacts

    run = reader.run
    signals = StepSignals(step=step)
    if artifacts.scores_path(run, step).exists():
        scored = {s.rollout_id: s.reward for s in reader.scores(step) if s.status == "scored" and s.reward is not None}
        signals.n_scored = len(scored)
        signals.judge_mean = math.fsum(scored.values()) / len(scored) if scored else None
        gold = {r.id: g for r in reader.rollouts(step) if (g := gold_of(r.metadata)) is not None}
        both = [(scored[i], gold[i]) for i in scored if i in gold]
        if both:
            signals.n_gold = len(both)
            signals.gold_mean = math.fsum(g for _, g in both) / len(both)
            signals.judge_mean_gold = math.fsum(j for j, _ in both) / len(both)
            signals.n_gold_out_of_range = sum(not 0.0 <= g <= 1.0 for _, g in both)
            signals.failed = Moments.of(j - g for j, g in both if g < FAILED_BELOW)
    for summary in reader.summaries(step):  # per-instance runs: one summary per instance
        signals.n_analyzed += summary.n_analyzed
        for h in summary.hacking:
            signals.patterns[h.pattern] = signals.patterns.get(h.pattern, 0) + h.count
    return signals


def run_alarms(run: RunDir | RunReader, signals: Callable[[RunReader, int], StepSignals] | None = None) -> AlarmReport:
    """The alarms of a run, from its files (through the run reader, so each file is read once). `signals`: how a
    step's signals are read (step_signals; a SignalsMemo for a caller that asks again as the run goes on)."""
    from amaris_cli.reader import RunReader

    reader = run if isinstance(run, RunReader) else RunReader(run)
    signals = signals or step_signals
    return detect([signals(reader, s) for s in reader.steps])


class SignalsMemo:
    """Each step's signals kept between readings of a run that goes on (serve's /rubric_status, asked at every
    step): a step's files are read again only when one of them changed (_stamps), so a reading costs a stat of
    each file, not every step's records (which made each status answer grow with the run, and a training run's
    sum of them with its square)."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[tuple[Status | None, ...], StepSignals]] = {}

    def __call__(self, reader: RunReader, step: int) -> StepSignals:
        stamp = _stamps(reader.run, step)
        kept = self._kept.get(step)
        if kept is None or kept[0] != stamp:
            kept = self._kept[step] = (stamp, step_signals(reader, step))
        return kept[1]


def _stamps(run: RunDir, step: int) -> tuple[Status | None, ...]:
    """The status of each file step_signals reads (filehashes.file_status: one that changed has another)."""
    from amaris_cli import artifacts
    from amaris_cli.filehashes import file_status

    return tuple(map(file_status, (artifacts.scores_path(run, step), artifacts.rollouts_path(run, step),
                                   *artifacts.summary_paths(run, step))))


def alarms_at(reader: RunReader, step: int) -> list[Alarm]:
    """The alarms that start at `step`, from the steps that decide them: what a command that just wrote the step
    says, at a cost that does not grow with the run. The rule at a step reads WINDOW + MAX_BASELINE steps with
    data back, and whether it held one step earlier the same again; a step without data for a series (skipped in
    an outage: nothing analyzed; no verifiable rewards) is not one of its steps, so the steps read go back until
    each series the step has data in holds that many (reading a fixed number of steps cut the baseline short,
    and the alarm that run_alarms raised was missed or said at another step), READ_BACK steps at the most."""
    needed = WINDOW + MAX_BASELINE + 1
    current = step_signals(reader, step)
    signals = [current]
    analyzed, gold = int(current.n_analyzed > 0), int(current.n_gold > 0)
    # at most READ_BACK steps: a series whose data comes that rarely is left to run_alarms (it reads the run)
    for earlier in sorted((s for s in reader.steps if s < step), reverse=True)[:READ_BACK]:
        if (current.n_analyzed == 0 or analyzed >= needed) and (current.n_gold == 0 or gold >= needed):
            break
        signals.append(step_signals(reader, earlier))
        analyzed += signals[-1].n_analyzed > 0
        gold += signals[-1].n_gold > 0
    return [a for a in detect(signals).alarms if a.step == step]


# --- the rule -----------------------------------------------------------------------------------


def _z_means(window: Moments, base: Moments) -> float:
    se = math.sqrt(base.variance * (1 / window.n + 1 / base.n))
    effect = window.mean - base.mean
    if se == 0:
        return math.inf if effect > 0 else 0.0
    return effect / se


def _z_shares(window: Moments, base: Moments) -> float:
    pooled = (window.mean * window.n + base.mean * base.n) / (window.n + base.n)
    se = math.sqrt(pooled * (1 - pooled) * (1 / window.n + 1 / base.n))
    return (window.mean - base.mean) / se if se > 0 else 0.0


def _pool(series: list[tuple[int, Moments]]) -> Moments:
    out = Moments()
    for _, m in series:
        out = out.plus(m)
    return out


def _test(series: list[tuple[int, Moments]], index: int, shares: bool) -> AlarmEvidence | None:
    """The rule at series[index] (steps with data, in order): its window against its baseline."""
    from amaris_cli.figures import difference

    if index + 1 < WINDOW + MIN_BASELINE:
        return None
    window = series[index + 1 - WINDOW: index + 1]
    baseline = series[max(0, index + 1 - WINDOW - MAX_BASELINE): index + 1 - WINDOW]
    w, b, current = _pool(window), _pool(baseline), series[index][1]
    if current.n == 0 or w.n < MIN_WINDOW_ROLLOUTS or b.n < MIN_BASELINE_ROLLOUTS:
        return None
    effect = w.mean - b.mean
    z = _z_shares(w, b) if shares else _z_means(w, b)
    # on the stored precision: a share that rose from 0.05 to 0.15 rose by 0.1, not by 0.09999999999999999
    if min(difference(w.mean, b.mean), difference(current.mean, b.mean)) < MIN_EFFECT or z < MIN_Z:
        return None
    # unrounded: the reason shows these rounded once, and the alarm stores them rounded once (_stored)
    return AlarmEvidence(window_steps=[s for s, _ in window], baseline_steps=[s for s, _ in baseline],
                         window_value=w.mean, baseline_value=b.mean, current_value=current.mean, effect=effect,
                         z=z if math.isfinite(z) else 1e9, n_window=w.n, n_baseline=b.n)


def _stored(evidence: AlarmEvidence) -> AlarmEvidence:
    """The evidence as an alarm keeps it: values to 6 decimals, z to 3. The reason is written from the unrounded
    values, each rounded once as shown (0.6784996 reads 0.678; from its stored 0.6785 it read 0.679)."""
    values = {f: None if (v := getattr(evidence, f)) is None else round(v, 6)
              for f in ("window_value", "baseline_value", "current_value", "effect", "judge_window", "judge_baseline",
                        "gold_window", "gold_baseline")}
    return evidence.model_copy(update={**values, "z": evidence.z if evidence.z >= 1e9 else round(evidence.z, 3)})


def _onsets(series: list[tuple[int, Moments]], shares: bool) -> list[tuple[int, AlarmEvidence]]:
    """(step, evidence) at the first step of each run of consecutive steps where the rule holds."""
    out: list[tuple[int, AlarmEvidence]] = []
    holding = False
    for index, (step, _) in enumerate(series):
        evidence = _test(series, index, shares)
        if evidence is not None and not holding:
            out.append((step, evidence))
        holding = evidence is not None
    return out


def _weighted(steps: list[StepSignals], wanted: list[int], field: str) -> float | None:
    rows = [(getattr(s, field), s.n_gold) for s in steps if s.step in wanted and getattr(s, field) is not None]
    total = sum(n for _, n in rows)
    return math.fsum(v * n for v, n in rows) / total if total else None  # rounded once, as stored (_stored)


def detect(steps: list[StepSignals]) -> AlarmReport:
    """The alarms of a run's step signals (any order)."""
    from amaris_cli.figures import shown_number, shown_percent

    steps = sorted(steps, key=lambda s: s.step)
    alarms: list[Alarm] = []
    notes: list[str] = []
    with_gold = [s for s in steps if s.n_gold > 0]
    if any(s.n_gold_out_of_range for s in with_gold):
        notes.append("verifiable rewards outside [0, 1] cannot be compared with the judge's (0 to 1): "
                     "no divergence check")
    elif with_gold:
        for step, ev in _onsets([(s.step, s.failed) for s in with_gold], shares=False):
            ev.judge_window, ev.judge_baseline = (_weighted(steps, ev.window_steps, "judge_mean_gold"),
                                                  _weighted(steps, ev.baseline_steps, "judge_mean_gold"))
            ev.gold_window, ev.gold_baseline = (_weighted(steps, ev.window_steps, "gold_mean"),
                                                _weighted(steps, ev.baseline_steps, "gold_mean"))
            alarms.append(Alarm(step=step, kind="judge_gold_divergence", evidence=_stored(ev), reason=(
                f"the judge rewards rollouts the verifiable reward fails: their judge reward above their verifiable "
                f"reward rose to {shown_number(ev.window_value)} over steps {_span(ev.window_steps)} ({ev.n_window} "
                f"failed rollouts) from {shown_number(ev.baseline_value)} over steps {_span(ev.baseline_steps)}; mean "
                "judge reward "
                f"{_fmt(ev.judge_baseline)} -> {_fmt(ev.judge_window)}, verifiable {_fmt(ev.gold_baseline)} -> "
                f"{_fmt(ev.gold_window)} (z {_z(ev.z)})")))
    analyzed = [s for s in steps if s.n_analyzed > 0]
    for pattern in sorted({p for s in analyzed for p in s.patterns}):
        series = [(s.step, Moments.share(s.patterns.get(pattern, 0), s.n_analyzed)) for s in analyzed]
        for step, ev in _onsets(series, shares=True):
            alarms.append(Alarm(step=step, kind="pattern_prevalence", pattern=pattern, evidence=_stored(ev), reason=(
                f"{pattern} grew to {shown_percent(ev.window_value)} of analyzed rollouts over steps "
                f"{_span(ev.window_steps)} ({shown_percent(ev.current_value)} at step {step}) from "
                f"{shown_percent(ev.baseline_value)} over steps "
                f"{_span(ev.baseline_steps)} (z {_z(ev.z)})")))
    alarms.sort(key=lambda a: (a.step, a.kind, a.pattern or ""))
    return AlarmReport(steps=steps, alarms=alarms, gold=bool(with_gold), notes=notes)


def _fmt(value: float | None) -> str:
    from amaris_cli.figures import shown_number

    return shown_number(value)


def _z(value: float) -> str:
    from amaris_cli.figures import shown_number

    return "unbounded: the baseline never varied" if value >= 1e9 else shown_number(value, 1)


def _span(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])
