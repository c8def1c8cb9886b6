"""Summary statistics with 95% confidence intervals (Wilson for rates, Student's t for means)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, stdev

from scipy import stats

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "value": round(self.value, 6),
            "low": round(self.low, 6),
            "high": round(self.high, 6),
            "n": self.n,
        }

    def text(self, fmt: str = "{:.3f}") -> str:
        return f"{fmt.format(self.value)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


def wilson(successes: int, n: int, z: float = Z95) -> Interval:
    """The Wilson score interval of a success rate (sensible at 0/n and n/n, unlike the normal one)."""
    if n <= 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..{n}, got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


def mean_ci(values: list[float], confidence: float = 0.95) -> Interval:
    """The mean with a Student's t interval (a single value: the interval is the value itself)."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    m = fmean(values)
    if n == 1:
        return Interval(m, m, m, 1)
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * stdev(values) / math.sqrt(n)
    return Interval(m, m - half, m + half, n)
