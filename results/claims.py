"""Claims a comparison can publish: one variant against a baseline on one metric, with n and a 95% interval.

Runs of different variants with the same ``repeat_index`` share their flow placement (the placement seed is the
scenario's seed and the repeat, never the variant), so they are paired: the interval is a Student t interval of the
per-repeat differences. Where pairing is impossible (unequal repeats, a repeat missing on one side, a metric that one
run could not compute, records without a repeat index), the interval is a percentile bootstrap of the difference of
the means, on a fixed seed so that a report is the same every time it is written. With fewer than two runs on
either side no interval exists: no winner is named, and the claim says how many repeats the spread seen would need.

A reading makes several claims at once (one per headline metric), and at 95% each, five metrics that do not
differ would name a false winner on at least one about a fifth of the time. So a claim is one of a family of ``m``
(the metrics compared between the same two variants), and its interval is a Bonferroni simultaneous one: each at
level 1 - 0.05 / m, so that the chance of any false winner in the family stays at or under 5%. With ``m = 1`` it is
the plain 95% interval.

Differences are always variant minus baseline (``a - b``), in the summary's SI units. The wording (``wording``)
turns a claim into one sentence:

- "A lower than B on M by X or P% (95% CI [lo, hi] u, simultaneous over m metrics, n = N, paired)": the interval
  excludes 0 (", simultaneous over m metrics" only when m > 1). The interval is of
  the amount lower (``b - a``) or higher (``a - b``), so that it reads beside X.
- "A vs B: no difference detected on M at n = N (95% CI [lo, hi] u, paired)": the interval (of ``a - b``) holds 0.
- "A vs B on M: x vs y from 1 and 1 run(s); no winner named from one run per variant. ...": how many repeats per
  variant would tell the observed difference apart, n the smallest with t(1 - 0.025 / m, n-1) * s / sqrt(n) < |a - b|,
  where s is the standard deviation of a difference of two runs, sqrt(2) times the pooled spread of the runs within
  each variant that has two or more (independent runs; pairing by placement can only narrow it). With no variant
  of two runs there is no spread to go by: at least 3 repeats per variant are needed to tell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

PAIRED = "paired t"
BOOTSTRAP = "bootstrap"
NO_INTERVAL = "none"  # fewer than two runs on a side

LOWER = "lower"
HIGHER = "higher"
NO_DIFFERENCE = "no difference"
NO_WINNER = "no winner"  # too few runs for an interval
NOT_APPLICABLE = "n/a"  # a side has no value

ALPHA = 0.05  # the family's error rate: the chance of any false winner among a reading's claims
RESAMPLES = 10_000
SEED = 1
MAX_REPEATS = 1000
MIN_REPEATS_UNKNOWN_SPREAD = 3

# one run's value of a metric: (repeat_index or None when the record has none, value or None when not computed)
Value = tuple[int | None, float | None]


@dataclass(frozen=True)
class Claim:
    """Variant ``a`` against baseline ``b`` on ``metric``; every number in the summary's SI units.

    ``diff`` is mean(a) - mean(b) (the mean per-repeat difference when paired), ``lo``/``hi`` its interval, one of
    ``family`` simultaneous ones (95% together);
    ``n`` the pairs (paired t) or the smaller side's runs; ``n_a``/``n_b`` each side's runs with a value;
    ``relative`` diff / |mean(b)| (None when mean(b) is 0); ``spread`` and ``needed``: the standard deviation of a
    two-run difference and the repeats per variant it would need (one-run claims only).
    """

    metric: str
    a: str
    b: str
    diff: float | None
    lo: float | None
    hi: float | None
    n: int
    method: str
    verdict: str
    mean_a: float | None = None
    mean_b: float | None = None
    n_a: int = 0
    n_b: int = 0
    relative: float | None = None
    resamples: int = 0
    spread: float | None = None
    needed: int | None = None
    reason: str | None = None
    family: int = 1

    @property
    def level(self) -> float:
        """Each interval's own confidence level: 1 - 0.05 / family (Bonferroni), 0.95 for a family of one."""
        return confidence(self.family)

    @property
    def winner(self) -> bool:
        """True when the interval excludes 0 (the claim names a direction)."""
        return self.verdict in (LOWER, HIGHER)


def _numbers(values: Sequence[Value]) -> np.ndarray:
    return np.asarray([v for _, v in values if v is not None and not math.isnan(v)], dtype=float)


def _pairs(a: Sequence[Value], b: Sequence[Value]) -> list[tuple[float, float]] | None:
    """The runs matched by repeat index, or None when some run has no partner (or no index, or no value)."""
    ia = [i for i, _ in a]
    ib = [i for i, _ in b]
    if None in ia or None in ib or len(set(ia)) != len(ia) or len(set(ib)) != len(ib) or set(ia) != set(ib):
        return None
    da, db = dict(a), dict(b)
    out = []
    for i in sorted(i for i in ia if i is not None):
        va, vb = da[i], db[i]
        if va is None or vb is None or math.isnan(va) or math.isnan(vb):
            return None
        out.append((va, vb))
    return out


def confidence(family: int = 1) -> float:
    """The level of each of ``family`` simultaneous intervals that hold together at 1 - ALPHA (Bonferroni)."""
    if family < 1:
        raise ValueError(f"a family has at least one claim, got {family}")
    return 1.0 - ALPHA / family


def t_quantile(df: int, family: int = 1) -> float:
    """Student t's two-sided quantile for one of ``family`` simultaneous intervals (2.776 for df 4 alone)."""
    return float(stats.t.ppf(1.0 - (1.0 - confidence(family)) / 2.0, df))


def paired_interval(pairs: Sequence[tuple[float, float]], family: int = 1) -> tuple[float, float, float]:
    """Mean of the differences a - b and its Student t interval, one of ``family`` simultaneous ones (at least
    two pairs)."""
    d = np.asarray([x - y for x, y in pairs], dtype=float)
    if d.size < 2:
        raise ValueError("a paired interval needs at least two pairs")
    mean = float(d.mean())
    half = t_quantile(d.size - 1, family) * float(d.std(ddof=1)) / math.sqrt(d.size)
    return mean, mean - half, mean + half


def bootstrap_interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    family: int = 1,
) -> tuple[float, float, float]:
    """mean(a) - mean(b) and the central ``confidence(family)`` share of that difference over ``resamples``
    resamples (2.5th to 97.5th percentile for a family of one), each side drawn with replacement on its own (numpy's
    default generator on ``seed``: reproducible)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    ma = xa[rng.integers(0, xa.size, size=(resamples, xa.size))].mean(axis=1)
    mb = xb[rng.integers(0, xb.size, size=(resamples, xb.size))].mean(axis=1)
    tail = 100.0 * (1.0 - confidence(family)) / 2.0
    lo, hi = np.percentile(ma - mb, [tail, 100.0 - tail])
    return float(xa.mean() - xb.mean()), float(lo), float(hi)


def repeats_needed(diff: float, spread: float, cap: int = MAX_REPEATS, family: int = 1) -> int | None:
    """The smallest n >= 2 with t(1 - 0.025 / family, n-1) * spread / sqrt(n) < |diff|; None when no n up to
    ``cap`` does (a difference of 0 never does)."""
    if diff == 0:
        return None
    for n in range(2, cap + 1):
        if t_quantile(n - 1, family) * spread / math.sqrt(n) < abs(diff):
            return n
    return None


def difference_spread(*sides: np.ndarray) -> float | None:
    """sqrt(2) x the pooled standard deviation of the sides with two or more values (None when none has)."""
    dof = sum(x.size - 1 for x in sides if x.size >= 2)
    if dof == 0:
        return None
    pooled = sum(float(((x - x.mean()) ** 2).sum()) for x in sides if x.size >= 2) / dof
    return math.sqrt(2.0 * pooled)


def _verdict(lo: float, hi: float) -> str:
    if lo > 0:
        return HIGHER
    if hi < 0:
        return LOWER
    return NO_DIFFERENCE


def compare_values(
    metric: str,
    a: str,
    a_values: Sequence[Value],
    b: str,
    b_values: Sequence[Value],
    resamples: int = RESAMPLES,
    seed: int = SEED,
    family: int = 1,
) -> Claim:
    """Variant ``a`` against baseline ``b`` on ``metric`` from each run's (repeat_index, value), as one claim of
    ``family`` made together (the interval is a simultaneous one)."""
    xa, xb = _numbers(a_values), _numbers(b_values)
    if xa.size == 0 or xb.size == 0:
        side = a if xa.size == 0 else b
        return Claim(
            metric, a, b, None, None, None, 0, NO_INTERVAL, NOT_APPLICABLE, reason=f"no value for {side}", family=family
        )
    mean_a, mean_b = float(xa.mean()), float(xb.mean())
    pairs = _pairs(a_values, b_values)
    spread: float | None = None
    needed: int | None = None
    if pairs is not None and len(pairs) >= 2:
        method, n, used = PAIRED, len(pairs), 0
        diff, lo, hi = paired_interval(pairs, family)
    elif xa.size >= 2 and xb.size >= 2:
        method, n, used = BOOTSTRAP, int(min(xa.size, xb.size)), resamples
        diff, lo, hi = bootstrap_interval(xa, xb, resamples, seed, family)
    else:
        diff = mean_a - mean_b
        spread = difference_spread(xa, xb)
        needed = repeats_needed(diff, spread, family=family) if spread is not None else None
        return Claim(
            metric, a, b, diff, None, None, int(min(xa.size, xb.size)), NO_INTERVAL, NO_WINNER,
            mean_a, mean_b, int(xa.size), int(xb.size), _relative(diff, mean_b), 0, spread, needed, family=family,
        )  # fmt: skip
    return Claim(
        metric, a, b, diff, lo, hi, n, method, _verdict(lo, hi),
        mean_a, mean_b, int(xa.size), int(xb.size), _relative(diff, mean_b), used, family=family,
    )  # fmt: skip


def _relative(diff: float, base: float) -> float | None:
    return diff / abs(base) if base != 0 else None


def _n_text(c: Claim) -> str:
    return f"{c.n_a} vs {c.n_b}" if c.method == BOOTSTRAP and c.n_a != c.n_b else str(c.n)


def _method_text(c: Claim) -> str:
    return "paired" if c.method == PAIRED else f"bootstrap, {c.resamples} resamples"


def _family_text(c: Claim) -> str:
    return f", simultaneous over {c.family} metrics" if c.family > 1 else ""


def _percent(x: float) -> str:
    p = abs(x) * 100
    return f"{p:.0f}%" if p >= 10 else f"{p:.2g}%"


def no_winner(c: Claim) -> str:
    """Why a claim without an interval names no winner: one run per variant, or one run (with a value) of one."""
    if c.n_a < 2 and c.n_b < 2:
        return "no winner named from one run per variant"
    return f"no winner named from one run of {c.a if c.n_a < 2 else c.b}"


def wording(c: Claim, what: str, show: Callable[[float], str], unit: str = "") -> str:
    """One sentence for the claim: ``what`` names the metric, ``show`` formats a value in its display unit (number
    only), ``unit`` follows the numbers ("ms"; "" for counts)."""
    u = f" {unit}" if unit else ""
    if c.verdict == NOT_APPLICABLE or c.diff is None:
        return f"{c.a} vs {c.b} on {what}: n/a ({c.reason or 'no values'})."
    if c.verdict in (LOWER, HIGHER):
        assert c.lo is not None and c.hi is not None
        lo, hi = (-c.hi, -c.lo) if c.verdict == LOWER else (c.lo, c.hi)
        rel = f" or {_percent(c.relative)}" if c.relative is not None else ""
        return (
            f"{c.a} {c.verdict} than {c.b} on {what} by {show(abs(c.diff))}{u}{rel} "
            f"(95% CI [{show(lo)}, {show(hi)}]{u}{_family_text(c)}, n = {_n_text(c)}, {_method_text(c)})."
        )
    if c.verdict == NO_DIFFERENCE:
        assert c.lo is not None and c.hi is not None
        return (
            f"{c.a} vs {c.b}: no difference detected on {what} at n = {_n_text(c)} "
            f"(95% CI [{show(c.lo)}, {show(c.hi)}]{u}{_family_text(c)}, {_method_text(c)})."
        )
    assert c.mean_a is not None and c.mean_b is not None
    runs = "run" if c.n_a == c.n_b == 1 else "runs"
    text = (
        f"{c.a} vs {c.b} on {what}: {show(c.mean_a)}{u} vs {show(c.mean_b)}{u} from {c.n_a} and {c.n_b} {runs}; "
        f"{no_winner(c)}."
    )
    if c.spread is None:
        return text + (
            f" No variant has two runs to show its spread: at least {MIN_REPEATS_UNKNOWN_SPREAD} repeats per variant"
            " are needed to tell."
        )
    if c.diff == 0:
        return text + " The values are equal: no number of repeats would name a winner."
    if c.needed is None:
        return text + (
            f" The spread seen within the variants (s = {show(c.spread)}{u} for a difference of two runs) would "
            f"need more than {MAX_REPEATS} repeats per variant to tell a {show(abs(c.diff))}{u} difference."
        )
    return text + (
        f" The spread seen within the variants (s = {show(c.spread)}{u} for a difference of two runs) would need "
        f"about {c.needed} repeats per variant to tell a {show(abs(c.diff))}{u} difference."
    )
