"""scenarios/scenario_helpers.backlog_percentiles: a queue's backlog percentiles weigh each row by the time it held."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from results.record import MANIFEST, SCHEMA

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scenarios"))
from scenario_helpers import backlog_percentiles


def _record(tmp_path: Path, rows: list[tuple[float, int]]) -> Path:
    (tmp_path / MANIFEST).write_text(json.dumps({"schema": SCHEMA}))
    lines = ["t,node,dev,backlog_bytes"] + [f"{t},l1,l1-eth1,{b}" for t, b in rows]
    (tmp_path / "queues.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_a_long_quiet_stretch_outweighs_many_busy_rows(tmp_path: Path) -> None:
    """9 s empty in one row, then 1 s of 100 rows at 50 kB: the median is 0 by time, though most rows are busy."""
    rows = [(0.0, 0)] + [(9.0 + i * 0.01, 50_000) for i in range(100)] + [(10.0, 50_000)]
    path = _record(tmp_path, rows)
    assert backlog_percentiles(path, "l1:l1-eth1", [50, 89, 91, 99], window=(0.0, 10.0)) == [0, 0, 50_000, 50_000]


def test_the_window_clips_the_rows_that_straddle_it(tmp_path: Path) -> None:
    """A value held from t=0 to 5 counts only for its part inside the window (4..6: one second of each)."""
    path = _record(tmp_path, [(0.0, 7_000), (5.0, 1_000), (10.0, 1_000)])
    assert backlog_percentiles(path, "l1:l1-eth1", [49, 51], window=(4.0, 6.0)) == [1_000, 7_000]


def test_no_time_in_the_window_is_an_error(tmp_path: Path) -> None:
    path = _record(tmp_path, [(0.0, 7_000), (1.0, 1_000)])
    with pytest.raises(ValueError, match="no queue sample"):
        backlog_percentiles(path, "l1:l1-eth1", [50], window=(5.0, 6.0))
