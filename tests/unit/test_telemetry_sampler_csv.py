"""The sampler's table writer: the same cells csv.writer wrote, without its cost."""

from __future__ import annotations

import csv
from pathlib import Path

from testbed.telemetry.sampler import QUEUES_HEADER, _Csv


def test_rows_read_back_as_csv_cells(tmp_path: Path) -> None:
    w = _Csv(tmp_path / "queues.csv", QUEUES_HEADER)
    w.row((1764624000.1234567, "l1", "l1-l1h1", 27042, 3, 12, "", 3456, 123456789, 13579, 0))
    w.row((1764624000.5, "s1", "s1-l2", 0, 0, 0, None, 0, 0, 0, 0))
    w.close()
    with open(tmp_path / "queues.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == list(QUEUES_HEADER)
    assert rows[0]["t"] == "1764624000.123457" and rows[0]["dev"] == "l1-l1h1" and rows[0]["marks"] == ""
    assert rows[0]["tx_bytes"] == "123456789" and rows[1]["marks"] == "" and rows[1]["node"] == "s1"
