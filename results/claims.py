"""Claims a comparison can publish: one variant against a baseline on one metric, with n and a 95% interval.

Runs of different variants with the same ``repeat_index`` share their flow placement (the placement seed is the
scenario's seed and the repeat, never the variant), so they are paired: the interval is a Student t interval of the
per-repeat differences. Where pairing is impossible (unequal repeats, a repeat missing on one side, a metric that one
run could not compute, records without a repeat index), the interval is a percentile bootstrap of the difference of
the means, on a fixed seed so that a report is the same every time it is written. With fewer than two runs on
either side no interval exists: no winner is named, and the claim says how many repeats the spread seen would need.

A reading makes several claims at once (one per headline metric), and at 95% each, five metrics that do not
differ would name a false winner on at least one about a fifth of the time. So the claims between the same two
variants are one family of ``m``, and a direction is named only where Holm's step-down procedure keeps it: the
claims' p-values (the paired t test's, or the bootstrap's two-sided share of resampled differences across 0) are
adjusted (``holm``), and a claim names a winner only when its adjusted p is at most 0.05. The chance of any false
winner in the family stays at or under 5%, with more power than Bonferroni's. The interval shown is each claim's
own 95% interval; with ``m = 1`` the adjusted p is the p.

Differences are always variant minus baseline (``a - b``), in the summary's SI units. The wording (``wording``)
turns a claim into one sentence:

- "A lower than B on M by X or P% (95% CI [lo, hi] u, n = N, paired; Holm p = 0.012 over m metrics)": the adjusted
  p is at most 0.05 (so the interval excludes 0); "; Holm p ..." only when m > 1, else "; p = ...". The interval is of
  the amount lower (``b - a``) or higher (``a - b``), so that it reads beside X.
- "A vs B: no difference detected on M at n = N (95% CI [lo, hi] u, paired; Holm p = 0.21 over m metrics)": the
  adjusted p is over 0.05 (the interval, of ``a - b``, may then exclude 0 when m > 1: the family holds it back).
- "A vs B on M: x vs y from 1 and 1 run(s); no winner named from one run per variant. ...": how many repeats per
  variant would tell the observed difference apart, n the smallest with t(0.975, n-1) * s / sqrt(n) < |a - b|,
  where s is the standard deviation of a difference of two runs, sqrt(2) times the pooled spread of the runs within
  each variant that has two or more (independent runs; pairing by placement can only narrow it). With no variant
  of two runs there is no spread to go by: at least 3 repeats per variant are needed to tell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

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
    ``family`` claims made together; ``p`` its own p-value, ``p_adjusted`` Holm's over the family;
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
    p: float | None = None
    p_adjusted: float | None = None

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


def t_quantile(df: int) -> float:
    """Student t's two-sided 95% quantile (t(0.975, df): 2.776 for df 4)."""
    return float(stats.t.ppf(1.0 - ALPHA / 2.0, df))


def paired_interval(pairs: Sequence[tuple[float, float]]) -> tuple[float, float, float, float]:
    """Mean of the differences a - b, its 95% Student t interval, and the paired t test's two-sided p (at least
    two pairs; p is 0 when every difference is the same and not 0, 1 when all are 0)."""
    d = np.asarray([x - y for x, y in pairs], dtype=float)
    if d.size < 2:
        raise ValueError("a paired interval needs at least two pairs")
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(d.size)
    half = t_quantile(d.size - 1) * se
    if se == 0:
        return mean, mean, mean, 1.0 if mean == 0 else 0.0
    return mean, mean - half, mean + half, float(2.0 * stats.t.sf(abs(mean) / se, d.size - 1))


def bootstrap_interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float, float, float]:
    """mean(a) - mean(b), the 2.5th and 97.5th percentiles of that difference over ``resamples`` resamples, each
    side drawn with replacement on its own (numpy's default generator on ``seed``: reproducible), and the two-sided
    share of resampled differences on the far side of 0 (twice the smaller tail, at least 1 / resamples)."""
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    ma = xa[rng.integers(0, xa.size, size=(resamples, xa.size))].mean(axis=1)
    mb = xb[rng.integers(0, xb.size, size=(resamples, xb.size))].mean(axis=1)
    d = ma - mb
    lo, hi = np.percentile(d, [100.0 * ALPHA / 2.0, 100.0 * (1.0 - ALPHA / 2.0)])
    tail = min(float((d <= 0).mean()), float((d >= 0).mean()))
    p = min(1.0, max(2.0 * tail, 1.0 / resamples))
    return float(xa.mean() - xb.mean()), float(lo), float(hi), p


def repeats_needed(diff: float, spread: float, cap: int = MAX_REPEATS) -> int | None:
    """The smallest n >= 2 with t(0.975, n-1) * spread / sqrt(n) < |diff|; None when no n up to ``cap`` does
    (a difference of 0 never does)."""
    if diff == 0:
        return None
    for n in range(2, cap + 1):
        if t_quantile(n - 1) * spread / math.sqrt(n) < abs(diff):
            return n
    return None


def difference_spread(*sides: np.ndarray) -> float | None:
    """sqrt(2) x the pooled standard deviation of the sides with two or more values (None when none has)."""
    dof = sum(x.size - 1 for x in sides if x.size >= 2)
    if dof == 0:
        return None
    pooled = sum(float(((x - x.mean()) ** 2).sum()) for x in sides if x.size >= 2) / dof
    return math.sqrt(2.0 * pooled)


def _verdict(lo: float, hi: float, p: float) -> str:
    """A direction where the (adjusted) p is at most ALPHA and the interval agrees, else no difference."""
    if p <= ALPHA and lo > 0:
        return HIGHER
    if p <= ALPHA and hi < 0:
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
) -> Claim:
    """Variant ``a`` against baseline ``b`` on ``metric`` from each run's (repeat_index, value), a family of one
    (``holm`` makes it one of several)."""
    xa, xb = _numbers(a_values), _numbers(b_values)
    if xa.size == 0 or xb.size == 0:
        side = a if xa.size == 0 else b
        return Claim(metric, a, b, None, None, None, 0, NO_INTERVAL, NOT_APPLICABLE, reason=f"no value for {side}")
    mean_a, mean_b = float(xa.mean()), float(xb.mean())
    pairs = _pairs(a_values, b_values)
    spread: float | None = None
    needed: int | None = None
    if pairs is not None and len(pairs) >= 2:
        method, n, used = PAIRED, len(pairs), 0
        diff, lo, hi, p = paired_interval(pairs)
    elif xa.size >= 2 and xb.size >= 2:
        method, n, used = BOOTSTRAP, int(min(xa.size, xb.size)), resamples
        diff, lo, hi, p = bootstrap_interval(xa, xb, resamples, seed)
    else:
        diff = mean_a - mean_b
        spread = difference_spread(xa, xb)
        needed = repeats_needed(diff, spread) if spread is not None else None
        return Claim(
            metric, a, b, diff, None, None, int(min(xa.size, xb.size)), NO_INTERVAL, NO_WINNER,
            mean_a, mean_b, int(xa.size), int(xb.size), _relative(diff, mean_b), 0, spread, needed,
        )  # fmt: skip
    return Claim(
        metric, a, b, diff, lo, hi, n, method, _verdict(lo, hi, p),
        mean_a, mean_b, int(xa.size), int(xb.size), _relative(diff, mean_b), used, p=p, p_adjusted=p,
    )  # fmt: skip


def holm(claims: Sequence[Claim]) -> list[Claim]:
    """The claims as one family (same order): Holm's adjusted p on those with a p, the verdicts redone from it.

    Sorted by p, the k-th smallest (k from 0) is adjusted to max over j <= k of min(1, (m - j) p_(j)), m the claims
    with a p; a claim keeps its direction only where that is at most 0.05."""
    ps = [(c.p, i) for i, c in enumerate(claims) if c.p is not None]
    m, out = len(ps), list(claims)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(ps)):
        running = max(running, min(1.0, (m - rank) * p))
        c = claims[i]
        assert c.lo is not None and c.hi is not None
        out[i] = replace(c, family=m, p_adjusted=running, verdict=_verdict(c.lo, c.hi, running))
    return out


def _relative(diff: float, base: float) -> float | None:
    return diff / abs(base) if base != 0 else None


def _n_text(c: Claim) -> str:
    return f"{c.n_a} vs {c.n_b}" if c.method == BOOTSTRAP and c.n_a != c.n_b else str(c.n)


def _method_text(c: Claim) -> str:
    return "paired" if c.method == PAIRED else f"bootstrap, {c.resamples} resamples"


def _p_text(c: Claim) -> str:
    p = c.p_adjusted if c.p_adjusted is not None else c.p
    if p is None:
        return ""
    shown = f"{p:.2g}" if p >= 0.001 else "< 0.001"
    shown = shown if shown.startswith("<") else f"= {shown}"
    return f"; Holm p {shown} over {c.family} metrics" if c.family > 1 else f"; p {shown}"


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
            f"(95% CI [{show(lo)}, {show(hi)}]{u}, n = {_n_text(c)}, {_method_text(c)}{_p_text(c)})."
        )
    if c.verdict == NO_DIFFERENCE:
        assert c.lo is not None and c.hi is not None
        return (
            f"{c.a} vs {c.b}: no difference detected on {what} at n = {_n_text(c)} "
            f"(95% CI [{show(c.lo)}, {show(c.hi)}]{u}, {_method_text(c)}{_p_text(c)})."
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
