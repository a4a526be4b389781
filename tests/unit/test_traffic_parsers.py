"""Every parser on canned raw output (tests/data/traffic): iperf3 JSON, worker, probe, FCT and train records."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from testbed.spec.workload import parse_job
from traffic.iperf import parse_iperf
from traffic.probes import draw_flows, parse_fct, parse_rtt
from traffic.ranked import bubble_fraction, parse_ranked
from traffic.scapy_train import build_frames, check_capture, decode_frame, fast_fields, parse_trains

DATA = Path(__file__).resolve().parent.parent / "data" / "traffic"
LOOP = DATA / "loopback"


def test_iperf_tcp() -> None:
    t = parse_iperf(DATA, "bg")
    (flow,) = t["flows"]
    assert flow["flow_id"] == "bg.c0.s5" and flow["proto"] == "tcp" and flow["dport"] == 15201
    assert flow["bytes"] == 6291456 and flow["retrans"] == 0
    assert flow["goodput_bps"] == pytest.approx(6291456 * 8 / 1.000092)
    assert flow["t_start"] == pytest.approx(1796106135.25) and flow["t_end"] == pytest.approx(1796106135.25 + 1.000705)
    assert len(t["flow_samples"]) == 4 and t["flow_samples"][0]["cwnd"] == 720313
    assert t["flow_samples"][0]["rtt_us"] == 77


def test_iperf_udp_two_streams() -> None:
    t = parse_iperf(DATA, "bgu")
    assert len(t["flows"]) == 2 and {f["proto"] for f in t["flows"]} == {"udp"}
    assert t["flows"][0]["bytes"] == 1254912 and t["flows"][0]["retrans"] is None
    assert len(t["flow_samples"]) == 8


def test_ranked_allreduce() -> None:
    t = parse_ranked(LOOP, "ar")
    iters = t["iterations"]
    assert [r["iter"] for r in iters] == [0, 1, 2] and [r["warmup"] for r in iters] == [1, 0, 0]
    r = iters[1]
    assert r["kind"] == "allreduce" and r["ranks"] == 4 and r["size_bytes"] == 64_000
    assert r["busbw_factor"] == pytest.approx(1.5)
    payload = 100e6 * (9000 - 52) / 9014 / 8  # default LinkSpec: 100 Mbit/s, MTU 9000, TCP payload per frame
    assert r["ideal_s"] == pytest.approx(2 * 3 / 4 * 64_000 / payload)
    assert r["t_end"] > r["t_start"]
    sends = [s for s in t["steps"] if s["iter"] == 1 and s["rank"] == "h0" and s["op"] == "send"]
    assert [s["step"] for s in sorted(sends, key=lambda s: s["step"])] == list(range(6))
    assert {s["peer"] for s in sends} == {"h1"} and sum(s["bytes"] for s in sends) == 6 * 16_000
    assert len(t["worker_cpu"]) == 4
    flows = t["flows"]  # one per connection direction a rank sent on: the ring's 4 hops
    assert sorted((f["src"], f["dst"]) for f in flows) == [("h0", "h1"), ("h1", "h2"), ("h2", "h3"), ("h3", "h0")]
    assert all(f["bytes"] == 3 * 6 * 16_000 and f["sport"] > 0 and f["dport"] >= 20_000 for f in flows)


def test_ranked_pipeline_and_bubble() -> None:
    t = parse_ranked(LOOP, "pp")
    assert "steps" not in t and t["iterations"][0]["kind"] == "pipeline"
    rows = t["pipeline"]
    comp0 = [
        (r["phase"], r["microbatch"])
        for r in sorted(rows, key=lambda r: r["t_start"])
        if r["stage"] == 0 and r["op"] == "compute"
    ]
    assert comp0 == [("fwd", 0), ("fwd", 1), ("fwd", 2), ("fwd", 3), ("bwd", 0), ("bwd", 1), ("bwd", 2), ("bwd", 3)]
    sends = [r for r in rows if r["stage"] == 1 and r["op"] == "send"]
    assert {(r["phase"], r["peer"]) for r in sends} == {("fwd", "h2"), ("bwd", "h0")}
    assert 0.2 < bubble_fraction(rows, 0) < 0.6  # 4 stages, 4 micro-batches: ideal 3/7 = 0.43


def test_rtt_and_fct() -> None:
    rtt = parse_rtt(LOOP, "rtt")["rtt"]
    assert [r["seq"] for r in rtt] == list(range(len(rtt))) and all(r["src"] == "h0" and r["dst"] == "h1" for r in rtt)
    assert statistics.median(r["rtt_s"] for r in rtt) < 0.01
    fct = parse_fct(LOOP, "inc")["fct"]
    assert [r["flow_id"] for r in fct] == list(range(6))
    assert {r["size_class"] for r in fct} == {"20000B"} and all(r["t_end"] > r["t_start"] for r in fct)
    assert {r["src"] for r in fct} == {"h0", "h1", "h2"} and {r["dst"] for r in fct} == {"h3"}


def test_draw_flows_deterministic() -> None:
    job = parse_job(
        {
            "kind": "shortflows",
            "name": "s",
            "senders": ["a", "b"],
            "receiver": "c",
            "sizes": [["10KB", 3], ["1MB", 1]],
            "count": 50,
            "seed": 3,
        },
        "w",
    )
    a, b = draw_flows(job), draw_flows(job)  # type: ignore[arg-type]
    assert a == b and len(a) == 2 and len(a[0]) == 50
    sizes = [f[1] for f in a[0] + a[1]]
    assert set(sizes) == {10_240, 1_048_576} and sizes.count(10_240) > sizes.count(1_048_576)


def test_trains_and_capture_check() -> None:
    rows = parse_trains(DATA, "tr")["trains"]
    assert [(r["sent"], r["received"], r["ce"], r["ect"], r["out_of_order"]) for r in rows] == [
        (4, 4, 2, 2, 1),
        (4, 3, 0, 3, 1),
    ]
    problems = check_capture(rows, "ect0")
    assert any("3 of 4" in p for p in problems) and any("out of order" in p for p in problems)
    assert check_capture(rows, "not_ect")  # ECN codepoints on a not-ECT train are a problem


@pytest.mark.parametrize(("payload", "ecn"), [("roce", "ect0"), ("udp", "not_ect"), ("roce", "ce")])
def test_frames_roundtrip_through_scapy_and_fast_parser(payload: str, ecn: str) -> None:
    cfg = {
        "trains": 2,
        "burst": 3,
        "size": 500,
        "payload": payload,
        "ecn": ecn,
        "qpn": 7,
        "src_ip": "10.1.1.2",
        "dst_ip": "10.2.2.2",
    }
    frames = build_frames(cfg, "02:00:00:00:00:01", "02:00:00:00:00:02")
    assert len(frames) == 6 and all(len(f) == 14 + 500 for f in frames)
    code = {"ect0": 2, "not_ect": 0, "ce": 3}[ecn]
    dport = 4791 if payload == "roce" else 4792
    for seq, frame in enumerate(frames):
        assert fast_fields(frame, dport) == (seq, code)
        d = decode_frame(frame)
        assert d["ecn"] == code and d["dport"] == dport
        if payload == "roce":
            assert d["psn"] == seq


def _documented_columns() -> dict[str, tuple[str, ...]]:
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text()
    return {m[1]: tuple(m[2].split(",")) for m in re.finditer(r"`(\w+)\.csv`: `([\w,]+)`", text)}


def test_parsers_emit_the_documented_columns() -> None:
    from traffic.base import TABLE_COLUMNS

    doc = _documented_columns()
    for table, cols in TABLE_COLUMNS.items():
        assert doc.get(table) == cols, f"{table}.csv: docs/architecture.md says {doc.get(table)}"
    tables = {}
    for rows in (
        parse_iperf(DATA, "bg"),
        parse_ranked(LOOP, "ar"),
        parse_ranked(LOOP, "pp"),
        parse_rtt(LOOP, "rtt"),
        parse_fct(LOOP, "inc"),
        parse_trains(DATA, "tr"),
    ):
        tables.update(rows)
    traffic_tables = {"iterations", "steps", "flows", "flow_samples", "fct", "rtt", "pipeline", "worker_cpu", "trains"}
    assert set(tables) == traffic_tables
    for table, rows in tables.items():
        assert rows, table
        for row in rows:
            assert tuple(row) == TABLE_COLUMNS[table], table
