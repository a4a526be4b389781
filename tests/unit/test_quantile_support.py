"""A percentile the sample cannot support is refused, with the reason, and every statistic names its n
(results.stats.supported_quantile, results.summary)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from results.metrics import summarize
from results.record import RunRecord, load_run
from results.stats import min_samples, supported_percentiles, supported_quantile
from results.summary import Summary, percentile_fields


def test_p99_needs_100_and_p999_needs_1000() -> None:
    assert supported_quantile(99, 99) == "p99 needs >= 100 samples, have 99"
    assert supported_quantile(99, 100) is None
    assert supported_quantile(99.9, 999) == "p99.9 needs >= 1000 samples, have 999"
    assert supported_quantile(99.9, 1000) is None


def test_the_rule_for_other_percentiles() -> None:
    assert [min_samples(q) for q in (0, 1, 5, 25, 50, 90, 95, 99, 99.9, 99.99, 100)] == [
        1, 100, 20, 4, 2, 10, 20, 100, 1000, 10000, 1,
    ]  # fmt: skip
    assert supported_quantile(50, 1) == "p50 needs >= 2 samples, have 1"
    assert supported_quantile(100, 1) is None  # the max of one value is that value
    for q in (-1, 100.1):
        with pytest.raises(ValueError, match=r"is 0\.\.100"):
            min_samples(q)


def test_supported_percentiles_ignores_nan_and_computes_the_rest() -> None:
    values = np.concatenate([np.arange(1.0, 101.0), [np.nan]])
    got, why, n = supported_percentiles(values, [50, 99, 99.9])
    assert n == 100 and got[:2] == [pytest.approx(50.5), pytest.approx(99.01)] and got[2] is None
    assert why == [None, None, "p99.9 needs >= 1000 samples, have 100"]
    assert supported_percentiles([], [50]) == ([None], ["p50 needs >= 2 samples, have 0"], 0)


def test_summary_puts_each_percentile_with_its_n() -> None:
    s = Summary()
    assert s.percentiles(np.arange(99.0), {"a_p50": 50, "a_p99": 99}) == 99
    assert s["a_p50"] == 49.0 and s["samples"] == {"a_p50": 99, "a_p99": 99}
    assert s["a_p99"] is None and s["not_applicable"]["a_p99"] == "p99 needs >= 100 samples, have 99"
    s.put("x", 1.0)
    assert "x" not in s["samples"]
    out = s.finished()
    assert list(out)[-2:] == ["samples", "not_applicable"]
    assert percentile_fields([1.0], {"p50_s": 50, "max": 100}) == {
        "n": 1, "p50_s": None, "max": 1.0, "not_applicable": {"p50_s": "p50 needs >= 2 samples, have 1"},
    }  # fmt: skip


def _fct_summary(tmp_path: Path, n: int) -> dict[str, Any]:
    rec = RunRecord.create(tmp_path, "m")
    rec.table("fct").write_many(
        [{"job": "s", "flow_id": i, "size_bytes": 1000, "t_start": 0.0, "t_end": 0.001 * (i + 1)} for i in range(n)]
    )
    rec.finish()
    return summarize(load_run(rec.path))


@pytest.mark.parametrize(("n", "p99", "p999"), [(99, False, False), (100, True, False), (999, True, False),
                                                (1000, True, True)])  # fmt: skip
def test_fct_tail_refused_below_its_sample_size(tmp_path: Path, n: int, p99: bool, p999: bool) -> None:
    s = _fct_summary(tmp_path, n)
    assert s["fct_n"] == n and s["samples"]["fct_p50_s"] == n and s["samples"]["fct_p999_s"] == n
    assert (s["fct_p99_s"] is not None) == p99 and (s["fct_p999_s"] is not None) == p999
    if not p999:
        assert s["not_applicable"]["fct_p999_s"] == f"p99.9 needs >= 1000 samples, have {n}"
    if p999:
        assert s["fct_p999_s"] == pytest.approx(np.percentile(0.001 * np.arange(1, n + 1), 99.9))
