"""The hottest queues' occupancy drawn as the sampler records it: each row's value held until the next row."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from results.compare import compare
from results.plots import queue_occupancy
from results.record import RunRecord, load_run
from results.style import StyleRegistry


def test_occupancy_holds_each_row_until_the_next(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "q")
    common = {"node": "s1", "dev": "s1-l1", "backlog_pkts": 0, "drops": 0, "overlimits": 0, "tx_bytes": 0}
    rows = [{"t": t, "backlog_bytes": b, **common} for t, b in ((100.0, 0), (101.0, 30_000), (100.5, 50_000))]
    rec.table("queues").write_many(rows)  # rows out of time order: the plot sorts them
    rec.finish()
    cmp = compare([load_run(rec.path)])
    fig = queue_occupancy(cmp, StyleRegistry(cmp.labels))
    (line,) = fig.axes[0].get_lines()
    assert line.get_drawstyle() == "steps-post"  # not a slope from 0 to 50 KB over the half second
    assert list(line.get_xdata()) == [0.0, 0.5, 1.0] and list(line.get_ydata()) == [0.0, 50.0, 30.0]
