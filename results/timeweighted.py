"""Time-weighted statistics of step series: tables whose rows record a value when it changed.

queues.csv and links.csv (testbed/telemetry/sampler.py) get a row for a port when one of its counters changed, a
keyframe when none changed for 0.1 s, and a final row when the sampler stops. A value holds from its row until the
port's next row, so rows are not samples: a busy second writes hundreds of rows, an idle one ten. A quantile or mean
over rows counts busy time many times over; here each row weighs the time it held its value.

Definitions, for one series sorted by time (row i holds ``v[i]`` over ``[t[i], t[i+1])``; the last row holds until
``end``, or for no time when no end is given, as the sampler's final row marks the end):

- weight: the length of a row's interval inside ``window`` (start, end), when one is given. A NaN value and a
  zero-length interval weigh nothing: of rows with the same time, the last one in table order holds.
- quantile q (0..1): the smallest value v such that the share of time at values <= v is >= q (the weighted
  empirical CDF, not interpolated: always a value the series held). Shares are compared with a tolerance of
  ``SHARE_TOL``, so a share that is q up to rounding counts as reaching it.
- mean: the sum of value x weight over the sum of weights.
- share above x: the time at values > x over the whole time.

A series with no weight (empty, one row and no end, all NaN, or nothing inside the window) has NaN for each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

SHARE_TOL = 1e-9
"""Relative tolerance on the time share a quantile must reach: times are epoch floats, so sums of intervals are
rounded, and a share that is exactly q on paper must not fall to the next value for want of the last bits."""


def _window(window: tuple[float, float] | None) -> tuple[float, float]:
    if window is None:
        return -np.inf, np.inf
    lo, hi = float(window[0]), float(window[1])
    if not hi >= lo:
        raise ValueError(f"window ends before it starts: {window}")
    return lo, hi


def held_seconds(
    t: np.ndarray, v: np.ndarray, end: float | None = None, window: tuple[float, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's value and the seconds it held inside ``window``, rows in time order (stable); see the module."""
    t, v = np.asarray(t, dtype=float), np.asarray(v, dtype=float)
    if t.shape != v.shape:
        raise ValueError(f"times and values differ in length: {t.shape} and {v.shape}")
    timed = ~np.isnan(t)  # a row without a time holds nothing
    order = np.argsort(t[timed], kind="stable")
    t, v = t[timed][order], v[timed][order]
    lo, hi = _window(window)
    if t.size == 0:
        return v, t
    stop = np.append(t[1:], t[-1] if end is None else max(float(end), t[-1]))
    seconds = np.clip(np.minimum(stop, hi) - np.maximum(t, lo), 0.0, None)
    seconds[np.isnan(v)] = 0.0
    return v, seconds


@dataclass(frozen=True)
class Held:
    """The distinct stretches of a step series with positive weight: ``values`` sorted, ``seconds`` each held."""

    values: np.ndarray
    seconds: np.ndarray

    @classmethod
    def of(
        cls,
        t: np.ndarray | Sequence[float],
        v: np.ndarray | Sequence[float],
        end: float | None = None,
        window: tuple[float, float] | None = None,
    ) -> Held:
        """The series of rows at times ``t`` with values ``v``, the last held until ``end``, inside ``window``."""
        values, seconds = held_seconds(np.asarray(t, dtype=float), np.asarray(v, dtype=float), end, window)
        keep = seconds > 0
        values, seconds = values[keep], seconds[keep]
        order = np.argsort(values, kind="stable")
        return cls(values[order], seconds[order])

    @property
    def total_s(self) -> float:
        """The time the figures are over."""
        return float(self.seconds.sum())

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """The time-weighted quantile of each q in ``qs`` (0..1); NaN each when the series has no weight."""
        q = np.asarray(qs, dtype=float)
        if ((q < 0) | (q > 1) | np.isnan(q)).any():
            raise ValueError(f"quantiles are shares of time in 0..1, got {list(qs)}")
        if self.values.size == 0:
            return [float("nan")] * q.size
        cum = np.cumsum(self.seconds)
        k = np.searchsorted(cum, q * cum[-1] * (1 - SHARE_TOL), "left")
        return [float(x) for x in self.values[np.minimum(k, self.values.size - 1)]]

    def quantile(self, q: float) -> float:
        return self.quantiles([q])[0]

    def mean(self) -> float:
        total = self.total_s
        return float((self.values * self.seconds).sum() / total) if total > 0 else float("nan")

    def share_above(self, threshold: float) -> float:
        """The share of the time the value was above ``threshold`` (strictly)."""
        total = self.total_s
        return float(self.seconds[self.values > threshold].sum() / total) if total > 0 else float("nan")


def quantiles(
    t: np.ndarray | Sequence[float],
    v: np.ndarray | Sequence[float],
    qs: Sequence[float],
    end: float | None = None,
    window: tuple[float, float] | None = None,
) -> list[float]:
    """Time-weighted quantiles (``qs`` in 0..1) of one step series; see the module."""
    return Held.of(t, v, end, window).quantiles(qs)


def mean(
    t: np.ndarray | Sequence[float],
    v: np.ndarray | Sequence[float],
    end: float | None = None,
    window: tuple[float, float] | None = None,
) -> float:
    """Time-weighted mean of one step series."""
    return Held.of(t, v, end, window).mean()


def share_above(
    t: np.ndarray | Sequence[float],
    v: np.ndarray | Sequence[float],
    threshold: float,
    end: float | None = None,
    window: tuple[float, float] | None = None,
) -> float:
    """The share of the time a step series was above ``threshold``."""
    return Held.of(t, v, end, window).share_above(threshold)


def column_name(q: float) -> str:
    """``p50``, ``p99``, ``p99.9`` for q = 0.5, 0.99, 0.999."""
    return f"p{round(q * 100, 6):g}"


def by_group(
    df: pd.DataFrame,
    value: str,
    by: Sequence[str] = ("node", "dev"),
    qs: Sequence[float] = (0.5, 0.99),
    time: str = "t",
    end: float | None = None,
    window: tuple[float, float] | None = None,
    above: float | None = None,
) -> pd.DataFrame:
    """Per group of ``by`` (a port of queues.csv or links.csv by default), the time-weighted figures of ``value``:
    ``seconds`` (the time they are over), ``mean``, one column per quantile (``column_name``: ``p50``, ``p99``) and,
    with ``above``, ``share_above``. Indexed by the groups, in sorted order; each group's last row holds until
    ``end`` (no time without one)."""
    cols = ["seconds", "mean", *(column_name(q) for q in qs), *(["share_above"] if above is not None else [])]
    missing = [c for c in (time, value, *by) if c not in df.columns]
    if missing:
        raise KeyError(f"the table has no column {', '.join(missing)}")
    keys = list(by)
    if df.empty:
        empty = pd.MultiIndex.from_tuples([], names=keys) if len(keys) > 1 else pd.Index([], name=keys[0])
        return pd.DataFrame(columns=cols, index=empty, dtype=float)
    frame = pd.DataFrame(
        {
            **{k: df[k] for k in keys},
            "_t": pd.to_numeric(df[time], errors="coerce"),
            "_v": pd.to_numeric(df[value], errors="coerce"),
        }
    )
    rows = []
    index = []
    for key, g in frame.groupby(keys if len(keys) > 1 else keys[0], sort=True):
        held = Held.of(g["_t"].to_numpy(float), g["_v"].to_numpy(float), end, window)
        row = [held.total_s, held.mean(), *held.quantiles(qs)]
        if above is not None:
            row.append(held.share_above(above))
        rows.append(row)
        index.append(key)
    idx = pd.MultiIndex.from_tuples(index, names=keys) if len(keys) > 1 else pd.Index(index, name=keys[0])
    return pd.DataFrame(rows, columns=cols, index=idx)
