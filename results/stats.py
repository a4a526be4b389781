"""Small statistics on numpy arrays: percentiles, mean with a t-distribution confidence interval, Jain's index.

Student t quantiles come from scipy (Debian's python3-scipy)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np
from scipy import stats


def t_quantile_975(df: int) -> float:
    """Student t's upper 0.975 quantile: the two-sided 95% interval's factor for ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return float(stats.t.ppf(0.975, df))


def mean_ci(values: Iterable[float]) -> tuple[float, float | None, int]:
    """Mean, half-width of its 95% confidence interval (None for fewer than 2 values), number of values.

    NaN values are ignored; an empty input raises ValueError.
    """
    a = np.asarray([v for v in values if v is not None], dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        raise ValueError("no values")
    mean = float(a.mean())
    if a.size < 2:
        return mean, None, 1
    half = t_quantile_975(a.size - 1) * float(a.std(ddof=1)) / math.sqrt(a.size)
    return mean, half, int(a.size)


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """Percentiles (0..100) with linear interpolation, NaN ignored; raises ValueError on no values."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        raise ValueError("no values")
    return [float(x) for x in np.percentile(a, qs)]


def quantile_label(q: float) -> str:
    """A percentile's name: 99.9 -> "p99.9", 50 -> "p50"."""
    return f"p{q:g}"


def min_samples(q: float) -> int:
    """The fewest values that support the ``q``th percentile (0..100): enough that at least one value is expected
    beyond it, n x (1 - q/100) >= 1 above the median and n x q/100 >= 1 below it. So p99 needs 100, p99.9 1000,
    p95 20 and p50 2 (one value is a value, not a median); the min and max (0, 100) need 1. Computed on the decimal
    value of ``q`` (99.9 is 999/1000, not the float just under it)."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is 0..100, got {q}")
    p = Fraction(str(q)) / 100
    tail = min(p, 1 - p)
    return 1 if tail == 0 else math.ceil(1 / tail)


def supported_quantile(q: float, n: int) -> str | None:
    """None when ``n`` values support the ``q``th percentile (0..100; ``min_samples``), else why not, as a
    not-applicable reason: "p99.9 needs >= 1000 samples, have 120". A caller whose values are not independent
    samples (a series held over time) passes the count it can stand behind."""
    need = min_samples(q)
    return None if n >= need else f"{quantile_label(q)} needs >= {need} samples, have {n}"


def supported_percentiles(
    values: Sequence[float] | np.ndarray, qs: Sequence[float]
) -> tuple[list[float | None], list[str | None], int]:
    """Each percentile of ``values`` (NaN ignored) that the sample supports, None where it does not; the reasons
    (``supported_quantile``, None where computed); and n, the values counted."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    reasons = [supported_quantile(q, int(a.size)) for q in qs]
    fine = [q for q, why in zip(qs, reasons, strict=True) if why is None]
    got = dict(zip(fine, percentiles(a, fine), strict=True)) if fine else {}
    return [got.get(q) for q in qs], reasons, int(a.size)


def jain_index(values: Sequence[float] | np.ndarray) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when all equal, 1/n when one takes everything."""
    a = np.asarray(values, dtype=float)
    a = a[~np.isnan(a)]
    if a.size == 0:
        raise ValueError("no values")
    sq = float((a * a).sum())
    if sq == 0:
        raise ValueError("all values are zero")
    return float(a.sum() ** 2 / (a.size * sq))


def ecdf(values: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their cumulative fractions (k/n), NaN removed."""
    a = np.sort(np.asarray(values, dtype=float))
    a = a[~np.isnan(a)]
    return a, np.arange(1, a.size + 1) / max(a.size, 1)
