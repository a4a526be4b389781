"""The sampler's record writer: writes leave the sampling loop, keep their order, and fail loudly."""

from __future__ import annotations

import csv
import json
import threading
import time
from pathlib import Path

import pytest

from testbed.telemetry.writer import BackgroundWriter, CsvTable, WriterError, replace_json


def test_a_blocked_write_does_not_block_the_caller(tmp_path: Path):
    """The bug: a flush that blocked on the filesystem (0.19-1.56 s in the guest) stalled the sampling loop."""
    writer = BackgroundWriter()
    release = threading.Event()
    writer.submit(lambda: release.wait(5))  # a write stuck in the filesystem
    table = CsvTable(tmp_path / "q.csv", ("t", "v"), writer)
    t0 = time.monotonic()
    for i in range(1000):
        table.row((i, i * 2))
        if i % 100 == 0:
            table.flush()
    handed_over_s = time.monotonic() - t0
    assert (tmp_path / "q.csv").read_text() == ""  # nothing written while the first write is stuck
    release.set()
    table.close()
    writer.close()
    assert handed_over_s < 0.5, handed_over_s
    rows = list(csv.reader((tmp_path / "q.csv").open()))
    assert rows[0] == ["t", "v"] and len(rows) == 1001
    assert [int(r[0]) for r in rows[1:]] == list(range(1000))  # in order
    assert table.rows == 1000


def test_a_failed_write_is_raised_on_the_next_submit_and_at_close(tmp_path: Path):
    writer = BackgroundWriter()

    def fail() -> None:
        raise OSError(28, "No space left on device")

    writer.submit(fail)
    deadline = time.monotonic() + 5
    while writer.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(WriterError, match="No space left"):
        writer.submit(lambda: None)
    with pytest.raises(WriterError, match="No space left"):
        writer.close()


def test_a_record_file_is_never_overwritten(tmp_path: Path):
    (tmp_path / "q.csv").write_text("t\n1\n")
    writer = BackgroundWriter()
    try:
        with pytest.raises(WriterError, match="never overwritten"):
            CsvTable(tmp_path / "q.csv", ("t",), writer)
    finally:
        writer.close()
    assert (tmp_path / "q.csv").read_text() == "t\n1\n"


def test_json_is_replaced_whole_and_in_order(tmp_path: Path):
    writer = BackgroundWriter()
    for i in range(50):
        replace_json(writer, tmp_path / "h.json", {"n": i})
    writer.close()
    assert json.loads((tmp_path / "h.json").read_text()) == {"n": 49}
    assert not (tmp_path / "h.json.tmp").exists()
