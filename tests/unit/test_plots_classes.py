"""The traffic-class figure (results.plots.classes): the busiest port with classes, each class's rate there."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from results.compare import compare
from results.plots.classes import class_throughput
from results.record import RunRecord, load_run
from results.style import StyleRegistry


class NoData(Exception):
    pass


def _row(node: str, dev: str, cls: str, sent: int, drops: int = 0) -> dict[str, object]:
    return {"node": node, "dev": dev, "class": cls, "dscp": "0", "tx_bytes": sent, "tx_pkts": 1, "drops": drops}


def test_bars_are_each_class_rate_at_the_busiest_port(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "qos")
    rec.set("traffic_window", [100.0, 104.0])
    rec.table("classes").write_many(
        [
            _row("l1", "l1-s1", "gold", 18_750_000, 676),
            _row("l1", "l1-s1", "be", 6_250_000, 2069),
            _row("l1", "l1-l1h1", "gold", 100),
            _row("l1", "l1-l1h1", "be", 100),
        ]
    )
    rec.finish()
    cmp = compare([load_run(rec.path)])
    fig = class_throughput(cmp, StyleRegistry(cmp.labels), NoData)
    ax = fig.axes[0]
    assert [round(p.get_height(), 3) for p in ax.patches] == [37.5, 12.5]  # 18.75 MB and 6.25 MB in 4 s
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gold", "be"]
    assert sorted(a.get_text() for a in ax.texts) == ["2069 drops", "676 drops"]
    assert "(l1:l1-s1)" in ax.get_legend().get_texts()[0].get_text()


def test_no_classes_is_no_data(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "plain")
    rec.set("traffic_window", [100.0, 104.0])
    rec.finish()
    cmp = compare([load_run(rec.path)])
    with pytest.raises(NoData, match="no run had traffic classes"):
        class_throughput(cmp, StyleRegistry(cmp.labels), NoData)


def test_fct_is_summarised_per_traffic_class(tmp_path: Path) -> None:
    from results.metrics import summarize
    from results.metrics.classes import class_of_jobs

    classes = [{"name": "ctrl", "dscp": [46]}, {"name": "be", "dscp": [0]}]
    workload = [{"name": "probe", "dscp": 46}, {"name": "bulk"}, {"name": "odd", "dscp": 12}]
    scenario = {"fabric": {"host_link": {"classes": classes}}, "workload": workload}
    assert class_of_jobs({"scenario": scenario}) == {"probe": "ctrl", "bulk": "be", "odd": "be"}  # DSCP 12: default
    assert class_of_jobs({"scenario": {"fabric": {"host_link": {}}, "workload": workload}}) == {}
    rec = RunRecord.create(tmp_path, "qos", scenario=scenario)
    rec.table("fct").write_many(
        [{"job": "probe", "flow_id": i, "size_bytes": 64, "t_start": 0.0, "t_end": 0.001 * (i + 1)} for i in range(3)]
        + [{"job": "bulk", "flow_id": 9, "size_bytes": 10_000, "t_start": 0.0, "t_end": 0.5}]
    )
    rec.finish()
    got = summarize(load_run(rec.path))["fct_by_traffic_class"]
    assert got["ctrl"]["n"] == 3 and abs(got["ctrl"]["p50_s"] - 0.002) < 1e-9 and got["ctrl"]["p99_s"] is None
    assert got["be"]["n"] == 1 and got["be"]["p50_s"] is None  # one flow is a value, not a median
    assert got["be"]["not_applicable"] == {
        "p50_s": "p50 needs >= 2 samples, have 1",
        "p99_s": "p99 needs >= 100 samples, have 1",
    }
