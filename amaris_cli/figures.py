"""Every figure a reader shows about a step, computed once, and shown the same way everywhere.

`score` reports a step's mean reward, `inspect`, `compare`, the report and `amaris serve` show it: they
all call `reward_figures` (rewards of the scored records only; failed records count as failed, never as
a reward) and `hacking_figures` (amaris's own counts from the step's summaries). What a person reads is
rounded by `shown_number` and `shown_percent`, half up on the decimal value (0.3125 is 0.313 and 12.5%
is 13%, as people and JavaScript's report page round), so the terminal and the page never disagree in
the last digit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from statistics import fmean, pstdev

from pydantic import BaseModel

from amaris_cli.models import HackingCount, ReliabilityRecord, ScoreRecord, SummaryRecord

MEAN_DECIMALS = 6  # the precision of every stored mean and spread (stats.json, --json outputs)
HISTOGRAM_BINS = 10  # reward distribution: tenths of [0, 1]


class RewardFigures(BaseModel):
    """A step's rewards: counts, mean and spread of the scored rollouts, and their distribution."""

    n: int
    scored: int
    failed: int
    mean: float | None
    std: float | None
    histogram: list[int]


def _round(x: float) -> float:
    return round(x, MEAN_DECIMALS)


def histogram(values: Iterable[float], bins: int = HISTOGRAM_BINS) -> list[int]:
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int(v * bins)))] += 1
    return counts


def reward_figures(records: Iterable[ScoreRecord]) -> RewardFigures:
    records = list(records)
    rewards = [r.reward for r in records if r.status == "scored" and r.reward is not None]
    return RewardFigures(n=len(records), scored=sum(r.status == "scored" for r in records),
                         failed=sum(r.status == "failed" for r in records),
                         mean=_round(fmean(rewards)) if rewards else None,
                         std=_round(pstdev(rewards)) if rewards else None, histogram=histogram(rewards))


def mean_reward(records: Iterable[ScoreRecord]) -> float | None:
    """The mean reward of a step's scored records (None when none was scored)."""
    return reward_figures(records).mean


def hacking_figures(summaries: Iterable[SummaryRecord]) -> list[HackingCount]:
    """The step's hacking patterns, summed over its summaries (one per instance in per-instance mode), with
    their prevalence among the analyzed rollouts; most frequent first."""
    summaries = list(summaries)
    counts: dict[str, list[int | bool]] = {}
    for summary in summaries:
        for h in summary.hacking:
            entry = counts.setdefault(h.pattern, [0, h.known])
            entry[0] += h.count
    analyzed = max(1, sum(s.n_analyzed for s in summaries))
    ranked = sorted(counts.items(), key=lambda kv: (-int(kv[1][0]), kv[0]))
    return [HackingCount(pattern=p, count=int(n), prevalence=_round(int(n) / analyzed), known=bool(known))
            for p, (n, known) in ranked]


class FlipCount(BaseModel):
    n: int  # re-judged verdicts
    flips: int  # of them, how many differ from the first verdict by more than the tolerance


class CriterionFlips(BaseModel):
    """One criterion's flip rate: the share of its re-judged verdicts that differ from the first beyond the
    tolerance; `repeat` and `permuted` split it by the kind of re-judgement (a criterion that flips only
    in permuted order shows position bias)."""

    criterion_id: str
    n: int
    flips: int
    rate: float | None
    repeat: FlipCount
    permuted: FlipCount


class VersionFlips(BaseModel):
    """The flip rates of one rubric version (an instance's own, per-instance), over the steps it scored."""

    rubric_version: int
    instance_id: str | None
    steps: list[int]
    rejudged: int  # rollouts judged again and answered
    failed: int  # re-judgements the judge gave no valid answer to (not counted as flips)
    tolerance: list[float]  # the tolerances of those steps (one, unless reliability.tolerance changed)
    criteria: list[CriterionFlips]


def difference(a: float, b: float) -> float:
    """a - b on the precision figures are stored with, as every threshold compares it: 0.55 - 0.3 is 0.25, not
    0.25000000000000006, and 0.40 - 0.35 is 0.05 (a value at its threshold was decided by float noise)."""
    return round(a - b, MEAN_DECIMALS)


def verdict_flipped(first: float, again: float, tolerance: float) -> bool:
    """Whether a verdict given again differs from the first beyond the tolerance."""
    return abs(difference(again, first)) > tolerance


@dataclass
class _Pool:
    """One rubric version's re-judgements while they are counted."""

    instance_id: str | None
    steps: set[int] = field(default_factory=set)
    tolerance: set[float] = field(default_factory=set)
    rejudged: int = 0
    failed: int = 0
    # criterion -> kind -> [verdicts judged again, flipped], in the order the rubric lists the criteria
    counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)


def flip_figures(records: Iterable[ReliabilityRecord]) -> list[VersionFlips]:
    """Each criterion's flip rate per rubric version, pooled over the given steps' re-judgements; versions in
    (instance, version) order, criteria in the order the rubric lists them (as the verdicts are stored)."""
    pools = FlipPools()
    for record in records:
        pools.add(record)
    return pools.figures()


class FlipPools:
    """flip_figures' counts as records are added, so that a reader that shows every step can pool a record once."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int], _Pool] = {}

    def add(self, record: ReliabilityRecord) -> None:
        for j in record.judgements:
            pool = self._pools.setdefault((j.instance_id or "", j.rubric_version), _Pool(j.instance_id))
            pool.steps.add(record.step)
            pool.tolerance.add(record.tolerance)
            if j.status != "judged":
                pool.failed += 1
                continue
            pool.rejudged += 1
            for v in j.verdicts:
                counts = pool.counts.setdefault(v.criterion_id, {"repeat": [0, 0], "permuted": [0, 0]})[j.kind]
                counts[0] += 1
                counts[1] += verdict_flipped(v.first, v.again, record.tolerance)

    def figures(self) -> list[VersionFlips]:
        out = []
        for (_, version), pool in sorted(self._pools.items()):
            criteria = []
            for cid, kinds in pool.counts.items():
                repeat, permuted = FlipCount(n=kinds["repeat"][0], flips=kinds["repeat"][1]), \
                    FlipCount(n=kinds["permuted"][0], flips=kinds["permuted"][1])
                n, flips = repeat.n + permuted.n, repeat.flips + permuted.flips
                criteria.append(CriterionFlips(criterion_id=cid, n=n, flips=flips,
                                               rate=_round(flips / n) if n else None, repeat=repeat, permuted=permuted))
            out.append(VersionFlips(rubric_version=version, instance_id=pool.instance_id, steps=sorted(pool.steps),
                                    rejudged=pool.rejudged, failed=pool.failed, tolerance=sorted(pool.tolerance),
                                    criteria=criteria))
        return out


def _half_up(x: float, digits: int, scale: int = 1) -> Decimal:
    """`x` x `scale` rounded half up, on the decimal value `x` is written as (0.145 is 14.5%, not 14.4999...%);
    a value that rounds to zero is 0, never -0 (as the report's own rounding shows it)."""
    return (Decimal(repr(x)) * scale).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP) + 0


def shown_number(x: float | None, digits: int = 3) -> str:
    """A figure as a person reads it: `digits` decimals, half up; `-` when there is none."""
    return "-" if x is None else f"{_half_up(x, digits):.{digits}f}"


def shown_cost(x: float | None) -> str:
    """Dollars as a person reads them: 4 decimals, half up on the cost to the millionth of a dollar, as stored (a sum of
    per-call costs carries float noise: $0.04995 adds up to 0.049949999999999994, which `:.4f` showed as 0.0499)."""
    return "-" if x is None else shown_number(round(x, MEAN_DECIMALS), 4)


def shown_percent(x: float | None) -> str:
    """A share in [0, 1] as a whole percentage, half up; `-` when there is none."""
    return "-" if x is None else f"{_half_up(x, 0, 100):.0f}%"
