"""Metrics on small hand-built runs whose right answers are known (results.metrics, results.metrics.fabric)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from results.metrics import METRICS, summarize
from results.metrics.fabric import util_max
from results.record import RunRecord, load_run
from results.stats import jain_index, mean_ci, percentiles, t_quantile_975

RATE = 100_000_000


def _port(node: str, peer: str, layer: str, peer_layer: str, direction: str) -> dict[str, Any]:
    return {
        "node": node,
        "dev": f"{node}-{peer}",
        "peer": peer,
        "layer": layer,
        "peer_layer": peer_layer,
        "direction": direction,
        "rate_bps": RATE,
        "buffer_bytes": 100_000,
        "mtu": 1500,
        "marking": "drop-tail",
    }


FABRIC = {
    "topology": "spine-leaf",
    "nodes": [
        {"name": "h1", "layer": "host", "netns": "tbx-h1", "ip": "10.0.1.1"},
        {"name": "h2", "layer": "host", "netns": "tbx-h2", "ip": "10.0.2.1"},
    ],
    "ports": [
        _port("l1", "s1", "leaf", "spine", "up"),
        _port("l1", "s2", "leaf", "spine", "up"),
        _port("h1", "l1", "host", "leaf", "up"),
    ],
}


def _run(
    tmp_path: Path,
    tables: dict[str, list[dict[str, Any]]],
    fabric: dict[str, Any] | None = FABRIC,
    window: tuple[float, float] | None = None,
) -> Any:
    rec = RunRecord.create(tmp_path, "m")
    if fabric:
        rec.set("fabric", fabric)
    if window:
        rec.set("traffic_window", list(window))
    for name, rows in tables.items():
        rec.table(name).write_many(rows)
    rec.finish()
    return load_run(rec.path)


def test_empty_run_every_metric_none_with_reason(tmp_path: Path) -> None:
    s = summarize(_run(tmp_path, {}, fabric=None))
    for m in METRICS:
        assert m in s, m
        if s[m] is None:
            assert s["not_applicable"][m], m
    assert s["drops_total"] is None and "queues.csv" in s["not_applicable"]["drops_total"]


def test_queue_counters_are_cumulative(tmp_path: Path) -> None:
    rows = []
    for i, (backlog, drops) in enumerate([(0, 100), (5000, 104), (90000, 110), (1000, 130)]):
        base = {
            "node": "l1",
            "dev": "l1-s1",
            "backlog_pkts": 0,
            "marks": 3 + i,
            "overlimits": 50,
            "tx_bytes": 1000 * i,
            "tx_pkts": i,
            "requeues": 0,
        }
        rows.append({"t": 10.0 + i * 0.001, "backlog_bytes": backlog, "drops": drops, **base})
    s = summarize(_run(tmp_path, {"queues": rows}))
    assert s["drops_total"] == 30  # last - first, not the kernel's absolute counter
    assert s["marks_total"] == 3
    assert s["overlimits_total"] == 0
    assert s["queue_backlog_max_bytes"] == 90000
    # time-weighted: 0, 5000 and 90000 each held 1 ms (the last row, 1000, ends the series), so p99 is 90000
    assert s["queues"]["l1:l1-s1"]["backlog_p99_bytes"] == 90000
    assert s["queue_sampling"]["rate_hz"] == pytest.approx(1000, rel=1e-6)


def _queue_row(t: float, backlog: float, node: str = "l1", dev: str = "l1-s1") -> dict[str, Any]:
    return {"t": t, "node": node, "dev": dev, "backlog_bytes": backlog, "backlog_pkts": 0, "drops": 0, "marks": "",
            "overlimits": 0, "tx_bytes": 0, "tx_pkts": 0, "requeues": 0}  # fmt: skip


def test_queue_p99_is_time_weighted_inside_the_traffic_window(tmp_path: Path) -> None:
    """queues.csv has a row on change: a 50 ms burst at 90 KB writes a row per ms, 10 s of an empty queue a keyframe
    per 0.1 s. The burst is a third of the rows and half a percent of the time: p99 over rows is 90 KB, over time 0.
    Before the traffic window (from t = 100) a 200 KB queue stood for 50 s: it counts for nothing; s1's 40 KB queue
    set before the window and held into it counts from the window's start."""
    rows = [_queue_row(50.0, 200_000.0)]
    rows += [_queue_row(100.0 + 0.1 * i, 0.0) for i in range(100)]
    rows += [_queue_row(110.0 + 0.001 * i, 90_000.0) for i in range(50)]
    rows += [_queue_row(110.05, 0.0)]
    rows += [_queue_row(t, b, "s1", "s1-l1") for t, b in ((99.0, 40_000.0), (109.0, 0.0), (110.05, 0.0))]
    s = summarize(_run(tmp_path, {"queues": rows}, window=(100.0, 110.05)))
    backlog = np.array([r["backlog_bytes"] for r in rows if r["node"] == "l1" and r["t"] >= 100])
    assert np.percentile(backlog, 99) == 90_000  # what the summary said when it took rows for samples
    assert s["queues"]["l1:l1-s1"]["backlog_p99_bytes"] == 0.0
    assert s["queues"]["l1:l1-s1"]["backlog_max_bytes"] == 200_000.0  # the max is every row's
    assert s["queues"]["s1:s1-l1"]["backlog_p99_bytes"] == 40_000.0  # 9 of the window's 10.05 s
    assert s["queue_backlog_p99_bytes"] == 40_000.0
    unwindowed = summarize(_run(tmp_path / "whole", {"queues": rows}))  # a record from before traffic_window
    assert unwindowed["queues"]["l1:l1-s1"]["backlog_p99_bytes"] == 200_000.0  # 50 of 60 s


def test_marks_total_counts_the_ebpf_markers_marks_once(tmp_path: Path) -> None:
    """The sampler's queue rows carry a copy of the eBPF marker's counter, and marks.csv has the final
    counter; marks_total was their sum (twice the receivers' CE packets). A marker's port now counts the marker's
    final counter (here above the rows' copy, which ends before the run does); a RED port counts its rows."""
    rows = []
    for i in range(3):
        common = {"backlog_bytes": 0, "backlog_pkts": 0, "drops": 0, "overlimits": 0, "tx_bytes": i, "tx_pkts": i}
        rows.append({"t": 10.0 + i * 0.1, "node": "l1", "dev": "l1-l1h1", "marks": 4 * i, "requeues": 0, **common})
        rows.append({"t": 10.0 + i * 0.1, "node": "l2", "dev": "l2-l2h1", "marks": "", "requeues": 0, **common})
        rows.append({"t": 10.0 + i * 0.1, "node": "s1", "dev": "s1-l1", "marks": 3 * i, "requeues": 0, **common})
    marks = [
        {"node": "l1", "dev": "l1-l1h1", "impl": "bpf", "marks": 10, "ect_seen": 100},
        {"node": "l2", "dev": "l2-l2h1", "impl": "bpf", "marks": 7, "ect_seen": 50},
    ]
    s = summarize(_run(tmp_path, {"queues": rows, "marks": marks}))
    assert s["marks_total"] == 10 + 7 + 6


def test_link_utilization_and_ecmp(tmp_path: Path) -> None:
    rows = []
    for i in range(11):  # 1 s at 0.1 s: s1 port 50 Mbit/s, s2 port 25 Mbit/s, host port idle
        t = 100.0 + i * 0.1
        for dev, bps in (("l1-s1", 50e6), ("l1-s2", 25e6)):
            rows.append(
                {
                    "t": t,
                    "node": "l1",
                    "dev": dev,
                    "tx_bytes": int(bps / 8 * 0.1 * i),
                    "tx_pkts": 0,
                    "rx_bytes": 0,
                    "rx_pkts": 0,
                    "tx_drops": 0,
                }
            )
        rows.append(
            {
                "t": t,
                "node": "h1",
                "dev": "h1-l1",
                "tx_bytes": 0,
                "tx_pkts": 0,
                "rx_bytes": 0,
                "rx_pkts": 0,
                "tx_drops": 0,
            }
        )
    s = summarize(_run(tmp_path, {"links": rows}))
    assert s["links"]["l1:l1-s1"]["util_mean"] == pytest.approx(0.5)
    assert s["links"]["l1:l1-s2"]["util_max"] == pytest.approx(0.25)
    assert s["link_util_mean"] == pytest.approx((0.5 + 0.25 + 0) / 3)
    assert s["link_util_max"] == pytest.approx(0.5)
    assert s["ecmp_imbalance"] == pytest.approx(50 / 37.5)  # max / mean over l1's two uplinks
    assert s["bytes_per_spine"] == {"s1": pytest.approx(6_250_000), "s2": pytest.approx(3_125_000)}
    assert "h1" not in s["ecmp_groups"]  # one uplink is not a group


def _link_rows(dev: str, times: np.ndarray, bps: np.ndarray) -> list[dict[str, Any]]:
    """links.csv rows of one port sending ``bps[i]`` from ``times[i]`` to ``times[i + 1]``."""
    tx = np.concatenate([[0.0], np.cumsum(bps[:-1] / 8 * np.diff(times))])
    return [{"t": float(t), "node": "l1", "dev": dev, "tx_bytes": float(b), "tx_pkts": 0, "rx_bytes": 0,
             "rx_pkts": 0, "tx_drops": 0} for t, b in zip(times, tx, strict=True)]  # fmt: skip


def test_link_util_peak_is_over_a_second_and_the_mean_over_the_traffic_window(tmp_path: Path) -> None:
    """l1-s1 idles 10 s (a keyframe per 0.1 s), then sends 50 Mbit/s for 5 s (a row per 10 ms) with one 0.1 s burst
    at line rate (HTB's bucket): over 0.1 s it peaks at 1.0, over any 1 s at 0.9 x 0.5 + 0.1 x 1 = 0.55. The traffic
    window is the 5 s of sending, so the mean is 0.5 + 0.05 / 5 there and half that over the whole 15 s."""
    idle = np.arange(100) * 0.1
    busy = 10.0 + np.arange(501) * 0.01
    times = np.concatenate([idle, busy])
    bps = np.where((times >= 10.0) & (times < 15.0), 50e6, 0.0)
    bps[(times >= 12.0) & (times < 12.1 - 1e-9)] = RATE
    rows = _link_rows("l1-s1", times, bps)
    s = summarize(_run(tmp_path, {"links": rows}, window=(10.0, 15.0)))
    port = s["links"]["l1:l1-s1"]
    assert port["util_max"] == pytest.approx(0.55)
    assert s["link_util_max"] == pytest.approx(0.55) and s["link_util_max_window_s"] == 1.0
    assert port["util_mean"] == pytest.approx(0.51)
    assert port["tx_bytes"] == pytest.approx((50e6 * 4.9 + 1e8 * 0.1) / 8)  # the run's bytes, not the window's
    t, tx = np.array([r["t"] for r in rows]), np.array([r["tx_bytes"] for r in rows])
    assert util_max(t, tx, RATE, window_s=0.1) == pytest.approx(1.0)
    whole = summarize(_run(tmp_path / "whole", {"links": rows}))
    assert whole["links"]["l1:l1-s1"]["util_mean"] == pytest.approx(0.51 * 5 / 15)


def test_util_max_of_a_series_shorter_than_its_window_is_its_mean() -> None:
    t, tx = np.array([0.0, 0.2, 0.4]), np.array([0.0, 2.5e6, 2.5e6])  # 100 Mbit/s, then idle
    assert util_max(t, tx, RATE) == pytest.approx(0.5)
    assert util_max(t, tx, RATE, window_s=0.2) == pytest.approx(1.0)
    assert util_max(t[:1], tx[:1], RATE) == 0.0


def test_no_parallel_uplinks_is_not_applicable(tmp_path: Path) -> None:
    fabric = {"topology": "spine-leaf", "nodes": [], "ports": [_port("h1", "l1", "host", "leaf", "up")]}
    rows = [
        {
            "t": float(i),
            "node": "h1",
            "dev": "h1-l1",
            "tx_bytes": i * 1000,
            "tx_pkts": 0,
            "rx_bytes": 0,
            "rx_pkts": 0,
            "tx_drops": 0,
        }
        for i in range(3)
    ]
    s = summarize(_run(tmp_path, {"links": rows}, fabric))
    assert s["ecmp_imbalance"] is None and "parallel uplinks" in s["not_applicable"]["ecmp_imbalance"]


def test_collectives_exclude_warmup(tmp_path: Path) -> None:
    rows = []
    for it, d in enumerate([5.0, 1.0, 1.0, 2.0]):  # the first iteration is warm-up and very slow
        rows.append(
            {
                "job": "ar",
                "kind": "allreduce",
                "algorithm": "ring",
                "iter": it,
                "warmup": it == 0,
                "t_start": 10.0 * it,
                "t_end": 10.0 * it + d,
                "size_bytes": 1_000_000,
                "ranks": 4,
                "ideal_s": 0.5,
                "busbw_factor": 1.5,
            }
        )
    s = summarize(_run(tmp_path, {"iterations": rows}))
    assert s["coll_iters_n"] == 3
    assert s["coll_iter_max_s"] == 2.0
    assert s["coll_iter_p50_s"] == 1.0
    assert s["algbw_bps"] == pytest.approx(6e6)  # nccl-tests': 8e6 bits over the mean time, 4/3 s
    assert s["busbw_bps"] == pytest.approx(9e6)
    assert s["algbw_median_iter_bps"] == pytest.approx(8e6)  # the median iteration's: of 8e6, 8e6, 4e6
    assert s["busbw_median_iter_bps"] == pytest.approx(12e6)
    assert s["measured_over_ideal"] == pytest.approx(2.0)


def test_flows_goodput_fairness_matrix_fct_rtt_netstat(tmp_path: Path) -> None:
    flows = [
        {
            "job": "bulk",
            "flow_id": i,
            "src": "10.0.1.1",
            "dst": "10.0.2.1",
            "proto": "tcp",
            "sport": i,
            "dport": 5201,
            "bytes": b,
            "t_start": 0.0,
            "t_end": 2.0,
            "goodput_bps": b * 4,
            "retrans": 0,
            "path": "",
        }
        for i, b in enumerate([1_000_000, 3_000_000])
    ]
    fct = [
        {
            "job": "s",
            "flow_id": i,
            "src": "h1",
            "dst": "h2",
            "size_bytes": 1000,
            "t_start": 0.5,
            "t_end": 0.5 + 0.001 * (i + 1),
            "size_class": "small",
        }
        for i in range(100)
    ]
    fct.append(
        {
            "job": "s",
            "flow_id": 100,
            "src": "h1",
            "dst": "h2",
            "size_bytes": 1000,
            "t_start": 0.5,
            "t_end": None,
            "size_class": "small",
        }
    )
    rtt = [
        {"job": "p", "src": "h1", "dst": "h2", "seq": i, "t_send": 0.1 * i, "rtt_s": 0.001 if i < 25 else 0.5}
        for i in range(30)
    ]  # samples after t=2.0 are outside the load window
    netstat = [
        {"host": "h1", "phase": ph, "counter": c, "value": v}
        for ph, c, v in [
            ("start", "Tcp.RetransSegs", 10),
            ("end", "Tcp.RetransSegs", 25),
            ("start", "TcpExt.TCPTimeouts", 1),
            ("end", "TcpExt.TCPTimeouts", 3),
            ("start", "TcpExt.TCPSACKReorder", 4),
            ("end", "TcpExt.TCPSACKReorder", 9),
            ("start", "TcpExt.TCPTSReorder", 0),
            ("end", "TcpExt.TCPTSReorder", 2),
        ]
    ]
    s = summarize(_run(tmp_path, {"flows": flows, "fct": fct, "rtt": rtt, "netstat": netstat}))
    assert s["goodput_bps"] == pytest.approx(16e6)
    assert s["goodput_per_job_bps"] == {"bulk": pytest.approx(16e6)}
    assert s["jain_fairness"] == pytest.approx(jain_index([4e6, 12e6])) == pytest.approx(0.8)
    assert s["traffic_matrix"] == {"h1": {"h2": 4_000_000}}  # IPs mapped to host names
    assert s["fct_n"] == 100 and s["fct_unfinished"] == 1
    assert s["fct_p50_s"] == pytest.approx(0.0505)
    assert s["fct_p99_s"] == pytest.approx(percentiles([0.001 * (i + 1) for i in range(100)], [99])[0])
    assert s["samples"]["fct_p99_s"] == 100
    assert s["fct_p999_s"] is None  # 100 flows cannot support a p99.9
    assert s["not_applicable"]["fct_p999_s"] == "p99.9 needs >= 1000 samples, have 100"
    small = s["fct_by_class"]["small"]
    assert small["n"] == 100 and small["p999_s"] is None and "have 100" in small["not_applicable"]["p999_s"]
    assert s["rtt_p50_s"] == pytest.approx(0.001) and s["rtt_n"] == 21  # t_send 0.0 .. 2.0
    assert s["rtt_p99_s"] is None and s["not_applicable"]["rtt_p99_s"] == "p99 needs >= 100 samples, have 21"
    assert s["retrans_total"] == 15 and s["timeouts_total"] == 2
    assert s["ce_delivered_total"] is None and "TCPDeliveredCE" in s["not_applicable"]["ce_delivered_total"]
    assert s["reorder_total"] == 7  # SACK- and timestamp-detected reordering, added
    assert s["dsack_total"] is None and "TCPDSACKRecv" in s["not_applicable"]["dsack_total"]


def test_steps_feed_traffic_matrix_with_rank_hosts(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "m")
    rec.set("ranks", {"ar": ["h1", "h2"]})
    rec.table("steps").write_many(
        [
            {
                "job": "ar",
                "iter": 0,
                "rank": r,
                "step": 0,
                "op": "send",
                "peer": 1 - r,
                "t_start": 0.0,
                "t_end": 1.0,
                "bytes": 500,
            }
            for r in (0, 1)
        ]
    )
    rec.finish()
    assert summarize(load_run(rec.path))["traffic_matrix"] == {"h1": {"h2": 500}, "h2": {"h1": 500}}


def test_stats() -> None:
    # textbook values of Student's t, upper 0.975 quantile
    assert t_quantile_975(2) == pytest.approx(4.303, abs=5e-4) and t_quantile_975(35) == pytest.approx(2.030, abs=5e-4)
    assert t_quantile_975(500) == pytest.approx(1.965, abs=5e-4)
    mean, half, n = mean_ci([1.0, 2.0, 3.0])
    assert (mean, n) == (2.0, 3) and half == pytest.approx(4.3027 * 1.0 / 3**0.5, abs=1e-4)
    assert mean_ci([5.0]) == (5.0, None, 1)
    with pytest.raises(ValueError):
        mean_ci([])
    assert jain_index([1, 1, 1, 1]) == 1.0 and jain_index([1, 0, 0, 0]) == 0.25
