"""The PFC figure (results.plots.pfc): pause time per port, and pause-seconds by hop from the congested queue."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from results.compare import compare
from results.plots.pfc import hops, pause_time
from results.record import RunRecord, load_run
from results.style import StyleRegistry
from results.tables import read_table


class NoData(Exception):
    pass


def _pause(port: str, queue: str, t: float, d: float) -> dict[str, object]:
    node, router = port.split("->")
    return {"port": port, "node": node, "dev": f"{node}-{router}", "router": router, "class": "rdma",
            "queue": queue, "t_start": t, "t_end": t + d, "duration_s": d, "backlog_bytes": 45070,
            "reaction_us": 80.0}  # fmt: skip


ROWS = [
    _pause("s1->l1", "l1->l1h1", 100.0, 1.0),  # the congested queue l1->l1h1 pauses its feeders: hop 1
    _pause("l1h2->l1", "l1->l1h1", 100.0, 0.5),
    _pause("l2->s1", "s1->l1", 100.2, 0.5),  # s1->l1 is paused itself: its queue's pauses are hop 2
    _pause("l2->s1", "s1->l1", 101.0, 0.3),
    _pause("l2h1->l2", "l2->s1", 100.3, 0.2),  # hop 3
]


def test_hops_count_from_the_queue_that_was_never_paused(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "pfc")
    rec.table("pauses").write_many(ROWS)
    rec.finish()
    tab = read_table(rec.path / "pauses.csv", ("port", "queue"))
    assert hops(tab) == {"s1->l1": 1, "l1h2->l1": 1, "l2->s1": 2, "l2h1->l2": 3}


def test_bars_are_pause_shares_and_pause_seconds_by_hop(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "pfc")
    rec.set("traffic_window", [100.0, 104.0])
    rec.table("pauses").write_many(ROWS)
    rec.finish()
    cmp = compare([load_run(rec.path)])
    fig = pause_time(cmp, StyleRegistry(cmp.labels), NoData)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_yticklabels()] == ["s1->l1", "l2->s1", "l1h2->l1", "l2h1->l2"]
    assert [round(p.get_width(), 1) for p in left.patches] == [25.0, 20.0, 12.5, 5.0]  # % of the 4 s window
    assert [round(p.get_height(), 2) for p in right.patches] == [1.5, 0.8, 0.2]  # hops 1, 2, 3


def test_no_pauses_is_no_data(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "plain")
    rec.set("traffic_window", [100.0, 104.0])
    rec.finish()
    cmp = compare([load_run(rec.path)])
    with pytest.raises(NoData, match="no run paused a port"):
        pause_time(cmp, StyleRegistry(cmp.labels), NoData)
