"""Time-weighted statistics of step series (results/timeweighted.py), on synthetic series with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from results.timeweighted import Held, by_group, column_name, held_seconds, mean, quantiles, share_above

EPOCH = 1_796_000_000.0  # times as the record writes them: epoch floats, whose sums round


def _idle_then_busy(t0: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """0 held 9 s (a keyframe row every 0.1 s), then 100 held 1 s with a row every 10 ms, and the final row."""
    idle = t0 + np.arange(90) * 0.1
    busy = t0 + 9.0 + np.arange(100) * 0.01
    t = np.concatenate([idle, busy, [t0 + 10.0]])
    v = np.concatenate([np.zeros(90), np.full(100, 100.0), [0.0]])
    return t, v


def test_a_value_weighs_the_time_it_held_not_its_rows() -> None:
    t, v = _idle_then_busy()
    assert quantiles(t, v, [0.5, 0.9, 0.95, 1.0]) == [0.0, 0.0, 100.0, 100.0]
    assert mean(t, v) == pytest.approx(10.0)
    assert share_above(t, v, 50) == pytest.approx(0.1)
    assert share_above(t, v, 100) == 0.0
    # the same table read as samples: the busy second has more rows than the nine idle ones
    assert np.percentile(v, 50) == 100.0 and v.mean() == pytest.approx(100 * 100 / 191)


def test_epoch_times_reach_a_share_that_is_exact_on_paper() -> None:
    t, v = _idle_then_busy(EPOCH)
    held = Held.of(t, v)
    assert held.total_s == pytest.approx(10.0, abs=1e-5)
    assert held.quantiles([0.9, 0.9001]) == [0.0, 100.0]  # 0 for 90% of the time: p90 is 0


def test_the_last_row_holds_until_the_end_given() -> None:
    t, v = [0.0, 1.0], [5.0, 7.0]
    assert Held.of(t, v).total_s == 1.0 and quantiles(t, v, [1.0]) == [5.0]  # no end: the last row marks it
    assert mean(t, v, end=4.0) == pytest.approx((5 * 1 + 7 * 3) / 4)
    assert mean(t, v, end=0.5) == 5.0  # an end before the last row gives it no time


def test_empty_one_row_and_nan() -> None:
    assert math.isnan(mean([], []))
    assert all(math.isnan(x) for x in quantiles([], [], [0.5, 0.99]))
    assert math.isnan(share_above([3.0], [1.0], 0))  # one row and no end: no time
    assert quantiles([3.0], [1.0], [0.5], end=4.0) == [1.0]
    # a NaN value's time counts for nothing (it is not held at the value before it); a NaN time drops its row
    t, v = [0.0, 1.0, 2.0, 3.0], [10.0, float("nan"), 30.0, 0.0]
    assert Held.of(t, v).total_s == 2.0 and mean(t, v) == pytest.approx(20.0)
    assert mean([0.0, float("nan"), 2.0], [10.0, 99.0, 0.0]) == 10.0


def test_duplicate_times_weigh_nothing_and_the_last_row_holds() -> None:
    values, seconds = held_seconds(np.array([0.0, 1.0, 1.0, 2.0]), np.array([1.0, 50.0, 2.0, 0.0]))
    assert list(values) == [1.0, 50.0, 2.0, 0.0] and list(seconds) == [1.0, 0.0, 1.0, 0.0]
    assert quantiles([0.0, 1.0, 1.0, 2.0], [1.0, 50.0, 2.0, 0.0], [1.0]) == [2.0]  # 50 was never held


def test_rows_out_of_order_are_sorted_by_time() -> None:
    assert mean([2.0, 0.0, 1.0], [0.0, 4.0, 8.0]) == pytest.approx(6.0)


def test_a_window_weighs_only_the_time_inside_it() -> None:
    t, v = [0.0, 10.0, 11.0, 20.0], [100.0, 0.0, 50.0, 0.0]
    # 100 is held from 0 to 10: inside [9, 12] it counts 1 s, 0 counts 1 s, 50 counts 1 s
    held = Held.of(t, v, window=(9.0, 12.0))
    assert held.total_s == pytest.approx(3.0)
    assert held.mean() == pytest.approx(50.0)
    assert held.quantiles([0.3, 0.5, 0.9]) == [0.0, 50.0, 100.0]
    assert math.isnan(mean(t, v, window=(30.0, 40.0)))  # after the last row: nothing is known there
    with pytest.raises(ValueError, match="window"):
        Held.of(t, v, window=(2.0, 1.0))


def test_quantiles_are_shares_in_0_to_1() -> None:
    with pytest.raises(ValueError, match=r"0\.\.1"):
        quantiles([0.0, 1.0], [1.0, 1.0], [99])
    assert quantiles([0.0, 1.0, 2.0], [3.0, 1.0, 0.0], [0.0]) == [1.0]  # q = 0: the smallest value held


def test_by_group_gives_each_port_its_own_figures() -> None:
    t, v = _idle_then_busy()
    df = pd.concat(
        [
            pd.DataFrame({"t": t, "node": "s1", "dev": "s1-l1", "backlog_bytes": v}),
            pd.DataFrame({"t": [0.0, 5.0, 10.0], "node": "l1", "dev": "l1-s1", "backlog_bytes": [8.0, 2.0, 0.0]}),
        ]
    ).sample(frac=1.0, random_state=1)  # the table's rows in any order
    got = by_group(df, "backlog_bytes", qs=(0.5, 0.95), above=5.0)
    assert list(got.columns) == ["seconds", "mean", "p50", "p95", "share_above"]
    assert list(got.index) == [("l1", "l1-s1"), ("s1", "s1-l1")]
    assert got.loc[("s1", "s1-l1")].tolist() == pytest.approx([10.0, 10.0, 0.0, 100.0, 0.1])
    assert got.loc[("l1", "l1-s1")].tolist() == pytest.approx([10.0, 5.0, 2.0, 8.0, 0.5])
    windowed = by_group(df, "backlog_bytes", qs=(0.5,), window=(9.0, 10.0))
    assert windowed.loc[("s1", "s1-l1"), "p50"] == 100.0 and windowed.loc[("l1", "l1-s1"), "mean"] == 2.0


def test_by_group_on_one_key_and_on_an_empty_table() -> None:
    df = pd.DataFrame({"t": [0.0, 1.0, 3.0], "host": ["a", "a", "a"], "x": [1.0, 3.0, 0.0]})
    got = by_group(df, "x", by=("host",), qs=(0.99,))
    assert list(got.index) == ["a"] and got.loc["a", "mean"] == pytest.approx((1 + 3 * 2) / 3)
    empty = by_group(df.iloc[:0], "x", by=("host",))
    assert empty.empty and list(empty.columns) == ["seconds", "mean", "p50", "p99"]
    with pytest.raises(KeyError, match="backlog_bytes"):
        by_group(df, "backlog_bytes")


def test_column_names() -> None:
    assert [column_name(q) for q in (0.5, 0.99, 0.999, 1.0)] == ["p50", "p99", "p99.9", "p100"]
