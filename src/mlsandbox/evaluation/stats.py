"""Summary statistics with 95% confidence intervals (Wilson for rates, Student's t for means), and the
unbiased pass@k and pass^k (pass-all-k) estimators over repeated episodes of the same task."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean, stdev

from scipy import stats

Z95 = 1.959963984540054


def _finite(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else x


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95% interval; ``low``/``high`` are NaN where the interval is undefined
    (no episode, or a Student's t interval of a single value)."""

    value: float
    low: float
    high: float
    n: int

    @property
    def defined(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: an undefined bound (or value) is ``None``, never NaN."""
        value, low, high = (_finite(x) for x in (self.value, self.low, self.high))
        return {
            "value": None if value is None else round(value, 6),
            "low": None if low is None else round(low, 6),
            "high": None if high is None else round(high, 6),
            "n": self.n,
        }

    @classmethod
    def from_dict(cls, d: dict[str, float | int | None]) -> Interval:
        def f(key: str) -> float:
            v = d.get(key)
            return math.nan if v is None else float(v)

        return cls(f("value"), f("low"), f("high"), int(d.get("n") or 0))

    def text(self, fmt: str = "{:.3f}") -> str:
        """``value [low, high]``; ``value [n/a]`` when the interval is undefined, ``n/a`` with no value."""
        if math.isnan(self.value):
            return "n/a"
        if not self.defined:
            return f"{fmt.format(self.value)} [n/a]"
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
    """The mean with a Student's t interval; with fewer than two values the interval is undefined (NaN
    bounds, shown as ``n/a``): one episode says nothing about the spread."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    m = fmean(values)
    if n == 1:
        return Interval(m, math.nan, math.nan, 1)
    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * stdev(values) / math.sqrt(n)
    return Interval(m, m - half, m + half, n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of ``k`` episodes drawn without replacement from ``n`` run episodes
    (``c`` of them successful) succeeds: ``1 - C(n-c, k) / C(n, k)``, the unbiased estimator of pass@k."""
    _check_counts(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_all_k(n: int, c: int, k: int) -> float:
    """The probability that all ``k`` episodes drawn without replacement from ``n`` run episodes (``c`` of
    them successful) succeed: ``C(c, k) / C(n, k)``, the unbiased estimator of pass^k (pass-all-k)."""
    _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"successes must be within 0..{n}, got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be within 1..{n} (the episodes run), got {k}")


def k_values(n: int) -> list[int]:
    """The k reported for ``n`` episodes per task: every k up to 10, then 20, 50, 100, 200, 500, ... below
    ``n``, and ``n`` itself."""
    ks = list(range(1, min(n, 10) + 1))
    decade = 10
    while n > 10:
        for m in (2, 5, 10):
            if m * decade >= n:
                return [*ks, n]
            ks.append(m * decade)
        decade *= 10
    return ks
