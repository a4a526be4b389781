"""busbw and algbw are nccl-tests' figures (the size over the mean iteration time), in the summary as in
nccl_tests.txt; the median iteration's figures keep their own names (results.metrics, results.nccl_tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from results.metrics import summarize
from results.nccl_tests import bandwidth
from results.record import RunRecord, load_run

SIZE = 1_000_000  # bytes
FACTOR = 1.5  # 2(n-1)/n for 4 ranks


def _iterations(times: list[float], job: str = "ar", size: int = SIZE) -> list[dict[str, Any]]:
    """A warm-up iteration, then one measured iteration per time."""
    rows = []
    for i, d in enumerate([9.0, *times]):
        rows.append({"job": job, "kind": "allreduce", "algorithm": "ring", "iter": i, "warmup": i == 0,
                     "t_start": 10.0 * i, "t_end": 10.0 * i + d, "size_bytes": size, "ranks": 4, "ideal_s": 0.5,
                     "busbw_factor": FACTOR})  # fmt: skip
    return rows


def _summary(tmp_path: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    rec = RunRecord.create(tmp_path, "m")
    rec.table("iterations").write_many(rows)
    rec.finish()
    return summarize(load_run(rec.path))


def test_bandwidth_is_the_size_over_the_mean_time() -> None:
    mean_s, algbw, busbw = bandwidth(1e6, [1.0, 3.0], 1.5)
    assert (mean_s, algbw, busbw) == (2.0, 5e5, 7.5e5)


def test_busbw_from_the_mean_time_and_the_median_iteration_apart(tmp_path: Path) -> None:
    """Four 1 s iterations and one 4 s stall: the mean time is 1.6 s, the median 1 s. nccl-tests' algbw is 8 Mbit
    over 1.6 s = 5 Mbit/s and busbw 1.5 x that; the median iteration's busbw is 12 Mbit/s."""
    s = _summary(tmp_path, _iterations([1.0, 1.0, 4.0, 1.0, 1.0]))
    assert s["coll_iter_mean_s"] == pytest.approx(1.6)
    assert s["algbw_bps"] == pytest.approx(5e6)
    assert s["busbw_bps"] == pytest.approx(7.5e6)
    assert s["algbw_median_iter_bps"] == pytest.approx(8e6)
    assert s["busbw_median_iter_bps"] == pytest.approx(12e6)
    line = s["nccl_tests"]["ar"]["rows"][0]  # the same figure on nccl_tests.txt's line (GB/s, bytes)
    assert s["busbw_bps"] == pytest.approx(line["busbw_GBps"] * 8e9)
    assert s["algbw_bps"] == pytest.approx(line["algbw_GBps"] * 8e9)
    assert line["time_us"] == pytest.approx(1.6e6)
    job = s["collective_per_job"]["ar"]
    assert job["busbw_bps"] == pytest.approx(7.5e6) and job["busbw_median_iter_bps"] == pytest.approx(12e6)
    for key in ("busbw_bps", "busbw_median_iter_bps", "coll_iter_p50_s", "coll_iter_mean_s"):
        assert s["samples"][key] == 5, key


def test_busbw_of_two_jobs_is_the_mean_of_theirs(tmp_path: Path) -> None:
    """Each job's busbw from its own mean time (2 s and 1 s: 6 and 12 Mbit/s), then their mean, as nccl-tests'
    average over its lines."""
    rows = _iterations([2.0, 2.0], job="a") + _iterations([1.0, 1.0], job="b")
    s = _summary(tmp_path, rows)
    assert s["collective_per_job"]["a"]["busbw_bps"] == pytest.approx(6e6)
    assert s["collective_per_job"]["b"]["busbw_bps"] == pytest.approx(12e6)
    assert s["busbw_bps"] == pytest.approx(9e6)


def test_eight_iterations_have_no_p99(tmp_path: Path) -> None:
    s = _summary(tmp_path, _iterations([1.0] * 7 + [2.0]))
    assert s["coll_iter_p50_s"] == 1.0 and s["coll_iter_max_s"] == 2.0
    assert s["coll_iter_p99_s"] is None
    assert s["not_applicable"]["coll_iter_p99_s"] == "p99 needs >= 100 samples, have 8"
    assert s["samples"]["coll_iter_p99_s"] == 8
    job = s["collective_per_job"]["ar"]
    assert job["n"] == 8 and job["p99_s"] is None and job["not_applicable"]["p99_s"].endswith("have 8")
