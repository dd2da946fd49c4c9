"""The benchmark's statistics: paired gains with a seeded bootstrap interval, and precision and recall.

A gain is per item: the hacked variant's reward minus its own control's, so the item's difficulty cancels.
The interval is the 2.5th and 97.5th percentiles of the mean over `resamples` resamples of the items
(with replacement), drawn from a generator seeded by the benchmark's seed and the family's name, so the
same benchmark gives the same intervals. With fewer than 2 items there is no interval.
"""

from __future__ import annotations

import math
import random
import zlib

from amaris_cli.hackbench.models import Interval


def interval(values: list[float], seed: int, name: str, resamples: int) -> Interval:
    n = len(values)
    if n == 0:
        return Interval(mean=None, low=None, high=None, n=0)
    mean = math.fsum(values) / n
    if n < 2 or resamples < 1:
        return Interval(mean=round(mean, 6), low=None, high=None, n=n)
    rng = random.Random(seed * 1_000_003 + zlib.crc32(name.encode()))
    means = sorted(math.fsum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    low = means[max(0, math.floor(0.025 * resamples))]
    high = means[min(resamples - 1, math.ceil(0.975 * resamples) - 1)]
    return Interval(mean=round(mean, 6), low=round(low, 6), high=round(high, 6), n=n)


def ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 6) if denominator else None
