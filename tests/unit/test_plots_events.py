"""Link events marked on the iteration timeline (results.plots.events)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from results.compare import compare
from results.plots.events import iteration_timeline
from results.record import RunRecord, load_run
from results.style import StyleRegistry


class NoData(Exception):
    pass


def test_timeline_marks_each_link_event(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "lf")
    rec.set("traffic_window", [100.0, 110.0])
    rows = [
        {"job": "ar", "iter": i, "warmup": 0, "t_start": 100.0 + i, "t_end": 100.5 + i + (i == 2)} for i in range(5)
    ]
    rec.table("iterations").write_many(rows)
    rec.table("link_events").write_many(
        [
            {"t": 102.2, "event": "down", "link": "s1-l2"},
            {"t": 102.3, "event": "rerouted", "link": "s1-l2", "after_s": 0.1, "routes": 3},
            {"t": 104.0, "event": "up", "link": "s1-l2"},
        ]
    )
    rec.finish()
    cmp = compare([load_run(rec.path)])
    fig = iteration_timeline(cmp, StyleRegistry(cmp.labels), NoData)
    ax = fig.axes[0]
    marks = sorted(round(line.get_xdata()[0], 3) for line in ax.get_lines() if len(line.get_xdata()) == 2)
    assert marks == [2.2, 2.3, 4.0]  # seconds since traffic started
    assert [t.get_text() for t in ax.texts] == ["s1-l2 down", "s1-l2 up"]  # the reroute is a dotted line only
    (series,) = [line for line in ax.get_lines() if len(line.get_xdata()) == 5]
    assert list(series.get_ydata()) == [0.5, 0.5, 1.5, 0.5, 0.5]
