"""Fidelity guardrails, pre-flight estimate and rate scaling on canned samples (no root)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from results.fidelity import (
    check_bottlenecks,
    check_cpu,
    check_gso,
    check_sampler,
    evaluate,
    evaluate_run,
    format_verdict,
)
from testbed.host.capabilities import Capabilities
from testbed.plan.load import estimate, preflight
from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.scaling import apply_scale, describe
from testbed.spec.workload import parse_workload

TWO_CPUS = Capabilities.from_dict({"cpus": 2})

RATE = 100e6
PORTS = [
    {"node": "s1", "dev": "s1-l2", "rate_bps": RATE, "mtu": 1500},
    {"node": "l1", "dev": "l1-s1", "rate_bps": RATE, "mtu": 1500},
]


def queue_trace(
    ratio: float,
    seconds: float = 2.0,
    hz: float = 1000.0,
    backlog: int = 60000,
    pkts: int = 40,
    node: str = "s1",
    dev: str = "s1-l2",
):
    """A queue sampled at ``hz``: non-empty throughout, sending ``ratio`` x RATE (counted in frame bytes)."""
    rows = []
    n = int(seconds * hz)
    for i in range(n + 1):
        t = 1000.0 + i / hz
        rows.append(
            {
                "t": t,
                "node": node,
                "dev": dev,
                "backlog_bytes": backlog,
                "backlog_pkts": pkts,
                "drops": 0,
                "marks": None,
                "overlimits": i,
                "tx_bytes": int(ratio * RATE / 8 * (t - 1000.0)),
                "tx_pkts": i,
                "requeues": 0,
            }
        )
    return rows


def idle_trace(node: str = "l1", dev: str = "l1-s1", seconds: float = 2.0):
    return [
        {"t": 1000.0 + i * 0.1, "node": node, "dev": dev, "backlog_bytes": 0, "backlog_pkts": 0, "tx_bytes": 5000 * i}
        for i in range(int(seconds * 10) + 1)
    ]


def cpu_trace(busy: float, seconds: float = 2.0, hz: float = 10.0, cores: int = 2):
    rows = []
    for i in range(int(seconds * hz)):
        t = 1000.0 + i / hz
        rows.append({"t": t, "cpu": "all", "busy": busy})
        rows += [{"t": t, "cpu": str(c), "busy": busy} for c in range(cores)]
    return rows


HEALTH = {"target_hz": 1000, "rate_hz_min": 998.0, "per_netns": {"tb1-s1": {"gap_max_ms": 3.1}}, "missing_samples": {}}


def test_saturated_link_at_0_8_of_rate_fails():
    c = check_bottlenecks(queue_trace(0.8) + idle_trace(), PORTS)
    assert c["ok"] is False
    assert c["value"] == pytest.approx(0.8, abs=0.01)
    assert "s1:s1-l2" in c["reason"]
    assert "l1:l1-s1" not in c["details"]  # idle: never busy, not judged


def test_one_short_busy_window_is_judged_with_a_wider_margin():
    # seen in a faithful CI run: one 0.2 s busy window at 0.949 of the rate failed the run
    assert check_bottlenecks(queue_trace(0.945, seconds=0.2) + idle_trace(), PORTS)["ok"] is True
    assert check_bottlenecks(queue_trace(0.895, seconds=0.2) + idle_trace(), PORTS)["ok"] is True
    assert check_bottlenecks(queue_trace(0.8, seconds=0.2) + idle_trace(), PORTS)["ok"] is False
    assert check_bottlenecks(queue_trace(0.94, seconds=1.0) + idle_trace(), PORTS)["ok"] is False


def test_one_57ms_sampler_stall_is_tolerated_but_a_long_one_is_not():
    stall = {**HEALTH, "per_netns": {"tb1-s1": {"gap_max_ms": 57.1}}}
    assert check_sampler(stall)["ok"] is True
    long = {**HEALTH, "per_netns": {"tb1-s1": {"gap_max_ms": 150.0}}}
    assert check_sampler(long)["ok"] is False


def test_saturated_link_at_0_99_passes():
    c = check_bottlenecks(queue_trace(0.99) + idle_trace(), PORTS)
    assert c["ok"] is True
    assert c["value"] == pytest.approx(0.99, abs=0.01)


def test_link_below_rate_but_not_busy_is_not_judged():
    rows = queue_trace(0.3, backlog=0, pkts=0)
    c = check_bottlenecks(rows, PORTS)
    assert c["ok"] is None and "no queue was non-empty" in c["reason"]


def test_coarse_sampling_short_queue_is_not_taken_for_a_busy_link():
    # 50 Hz (TCG guest): a queue seen holding one 9 KB frame at every row drains in 0.72 ms at 100 Mbit/s, so the
    # 20 ms between rows may be mostly idle; sample-and-hold would call it busy and flag 0.6 of the rate.
    rows = queue_trace(0.6, hz=50.0, backlog=9014, pkts=1)
    c = check_bottlenecks(rows, PORTS)
    assert c["ok"] is None and "no queue was non-empty" in c["reason"]


def test_coarse_sampling_deep_queue_short_of_rate_still_fails():
    # 50 Hz, but the backlog seen (300 KB = 24 ms at 100 Mbit/s) guarantees the link busy between rows
    rows = queue_trace(0.6, hz=50.0, backlog=300_000, pkts=34)
    c = check_bottlenecks(rows, PORTS)
    assert c["ok"] is False
    assert c["value"] == pytest.approx(0.6, abs=0.02)


def test_fine_sampling_keeps_sample_and_hold():
    rows = queue_trace(0.6, hz=1000.0, backlog=9014, pkts=1)
    assert check_bottlenecks(rows, PORTS)["ok"] is False


def test_busy_only_half_the_time_does_not_count():
    rows = queue_trace(0.5)
    for r in rows:
        if int((r["t"] - 1000.0) * 1000) % 2:
            r["backlog_pkts"] = r["backlog_bytes"] = 0
    assert check_bottlenecks(rows, PORTS)["ok"] is None


def test_a_queue_that_empties_for_moments_is_judged_over_its_busy_time():
    """The bug: the rate was taken over the whole busy window, so a port whose queue emptied 5.5% of the time and sent
    at line rate whenever it held packets read 0.945 and failed (CI, three takes of a 1:1 fabric; 1.004-1.011 over
    the time the queues held packets)."""
    rows = queue_trace(1.0)
    sent = 0
    for i, r in enumerate(rows):
        idle = i % 18 == 17  # empty in 1 of 18 samples: 94.4% busy, above busy_share
        if idle:
            r["backlog_pkts"] = r["backlog_bytes"] = 0
        r["tx_bytes"] = sent
        sent += 0 if idle else int(RATE / 8 / 1000.0)
    c = check_bottlenecks(rows, PORTS)
    assert c["ok"] is True, c["reason"]
    assert c["value"] == pytest.approx(1.0, abs=0.01)


def test_a_busy_queue_short_of_rate_still_fails_when_it_empties_for_moments():
    rows = queue_trace(0.85)
    for i, r in enumerate(rows):
        if i % 18 == 17:
            r["backlog_pkts"] = r["backlog_bytes"] = 0
    c = check_bottlenecks(rows, PORTS)
    assert c["ok"] is False
    assert c["value"] == pytest.approx(0.85 * 18 / 17, abs=0.01)


def test_tx_from_links_when_queue_lacks_it():
    rows = queue_trace(0.8)
    for r in rows:
        r["tx_bytes"] = None
    links = [
        {"t": 1000.0 + i * 0.01, "node": "s1", "dev": "s1-l2", "tx_bytes": int(0.8 * RATE / 8 * i * 0.01)}
        for i in range(201)
    ]
    c = check_bottlenecks(rows, PORTS, links)
    assert c["ok"] is False and c["value"] == pytest.approx(0.8, abs=0.01)


def test_string_cells_are_read():
    rows = [{k: ("" if v is None else str(v)) for k, v in r.items()} for r in queue_trace(0.8)]
    assert check_bottlenecks(rows, PORTS)["ok"] is False


def test_cpu_at_100_percent_fails_and_light_passes():
    bad = check_cpu(cpu_trace(1.0))
    assert bad["ok"] is False and bad["value"] == 1.0
    assert check_cpu(cpu_trace(0.4))["ok"] is True


def test_cpu_one_core_saturated_is_not_saturation():
    rows = [r if r["cpu"] != "1" else {**r, "busy": 0.5} for r in cpu_trace(1.0)]
    assert check_cpu(rows)["ok"] is True


def test_cpu_saturated_in_a_short_burst_passes():
    rows = cpu_trace(0.5, seconds=10)
    for r in rows[: 3 * 5]:  # the first 0.5 s of 10 s = 5%
        r["busy"] = 1.0
    assert check_cpu(rows)["ok"] is True


def test_gso_superpackets_flagged():
    rows = queue_trace(0.99, backlog=80000, pkts=2)  # 40 KB "packets" at MTU 1500
    c = check_gso(rows, PORTS)
    assert c["ok"] is False and c["value"] == 40000.0
    assert "super-packets" in c["reason"]
    assert check_gso(queue_trace(0.99, backlog=60560, pkts=40), PORTS)["ok"] is True  # 1514 B each


def test_gso_a_dump_one_packet_off_is_not_a_super_packet():
    # measured: 45070 B (5 frames) in "4" packets, 27042 B in "2" (the kernel reads qlen and backlog apart); the
    # TCG guest shows it in 0.16-0.3 % of a busy queue's samples, natively 18028 B in "1" packet once in 60,000
    good = queue_trace(0.99, backlog=60560, pkts=40)
    off_by_one = [dict(r, backlog_bytes=(n + 1) * 1514, backlog_pkts=n) for n, r in enumerate(good[:200], 1)]
    c = check_gso(good + off_by_one, PORTS)
    assert c["ok"] is True and "tolerated" not in c["reason"], c["reason"]
    two_extra = [dict(r, backlog_bytes=(n + 2) * 1514 + 200) for r, n in zip(off_by_one, range(1, 201))]
    assert check_gso(good + two_extra, PORTS)["ok"] is False


def test_gso_one_stray_sample_is_tolerated_but_a_share_is_not():
    good = queue_trace(0.99, backlog=60560, pkts=40)
    stray = dict(good[len(good) // 2], backlog_bytes=4542, backlog_pkts=1)  # 3 frames in one skb
    rows = good * 3 + [stray]
    c = check_gso(rows, PORTS)
    assert len(rows) > 1000 and c["ok"] is True, c["reason"]
    assert "tolerated" in c["reason"]
    many = good + [stray] * (len(good) // 10)
    assert check_gso(many, PORTS)["ok"] is False


def test_gso_one_stray_sample_is_tolerated_at_coarse_sampling_two_are_not():
    good = queue_trace(0.99, hz=50.0, seconds=3.0, backlog=60560, pkts=40)  # 151 samples: 0.1 % is under one
    stray = dict(good[len(good) // 2], backlog_bytes=36056, backlog_pkts=1)
    assert check_gso([*good, stray], PORTS)["ok"] is True
    assert check_gso([*good, stray, stray], PORTS)["ok"] is False


def test_sampler_health():
    assert check_sampler(HEALTH)["ok"] is True
    slow = {**HEALTH, "rate_hz_min": 600.0}
    assert check_sampler(slow)["ok"] is False
    gap = {**HEALTH, "per_netns": {"tb1-s1": {"gap_max_ms": 250.0}}}
    assert check_sampler(gap)["ok"] is False


def test_sampler_without_health_judges_gaps_only():
    rows = idle_trace()
    assert check_sampler(None, rows)["ok"] is None
    rows[10:] = [{**r, "t": r["t"] + 1.0} for r in rows[10:]]  # a 1.1 s hole
    assert check_sampler(None, rows)["ok"] is False


def test_evaluate_verdict():
    good = evaluate(queue_trace(0.99), [], cpu_trace(0.4), PORTS, HEALTH)
    assert good["faithful"] is True and {c["name"] for c in good["checks"]} == {
        "bottleneck_rate",
        "cpu_saturation",
        "sampler",
        "gso_superpackets",
    }
    bad = evaluate(queue_trace(0.8), [], cpu_trace(1.0), PORTS, HEALTH)
    assert bad["faithful"] is False and bad["status"] == "not faithful"
    assert [f.split(":")[0] for f in bad["failed"]] == ["bottleneck_rate", "cpu_saturation"]
    assert "NOT FAITHFUL" in format_verdict(bad)


def test_evaluate_window_limits_samples():
    rows = queue_trace(0.8, seconds=1.0) + [{**r, "t": r["t"] + 5} for r in queue_trace(0.99, seconds=1.0)]
    assert evaluate(rows, [], [], PORTS, HEALTH, window=(1004.9, 1006.1))["faithful"] is True


def test_evaluate_run_reads_manifest_ports():
    class FakeRun:
        manifest: ClassVar[dict] = {
            "fabric": {"ports": PORTS},
            "scenario": {"fabric": {"transport": {"gso_max_segs": 1}}},
        }
        path = None

        def table(self, name):
            return {"queues": queue_trace(0.8), "links": [], "cpu": cpu_trace(0.3)}[name]

    v = evaluate_run(FakeRun(), HEALTH)
    assert v["faithful"] is False


def _spec(rate: str, mtu: int, hosts_per_leaf: int = 4) -> FabricSpec:
    return FabricSpec.from_dict(
        {
            "spines": 2,
            "leaves": 4,
            "hosts_per_leaf": hosts_per_leaf,
            "host_link": {"rate": rate, "mtu": mtu, "buffer": "300KB"},
        }
    )


def _ring(spec: FabricSpec, rate: str | None = None):
    from testbed.spec.topology import Topology

    hosts = list(Topology(spec).hosts)
    jobs = [
        {"kind": "iperf", "name": f"f{i}", "src": h, "dst": hosts[(i + 1) % len(hosts)]} for i, h in enumerate(hosts)
    ]
    if rate:
        for j in jobs:
            j["rate"] = rate
    return parse_workload(jobs)


def test_preflight_warns_16_flows_at_1gbit_mtu1500():
    spec = _spec("1Gbit", 1500)
    w = preflight(spec, _ring(spec), TWO_CPUS)
    assert len(w) == 2 and "16 flows" in w[0]
    assert "fabric.scale" in w[1] and "mtu: 9000" in w[1]


def test_preflight_scaled_down_passes():
    spec = _spec("10Mbit", 1500)
    assert preflight(spec, _ring(spec), TWO_CPUS) == []


def test_preflight_matches_measured_ring():
    # measured on 2 cores: 8-flow ring on 2x4x2, 100 Mbit: MTU 1500 CPU-bound (93%), MTU 9000 fine (36%); 50 Mbit: 85%
    for rate, mtu, lo, hi in (("100Mbit", 9000, 0.2, 0.5), ("50Mbit", 1500, 0.7, 1.0), ("100Mbit", 1500, 1.0, 2.5)):
        spec = _spec(rate, mtu, hosts_per_leaf=2)
        e = estimate(spec, _ring(spec), TWO_CPUS)
        assert e.flows == 8 and lo <= e.load <= hi, (rate, mtu, e.load)


def test_preflight_collective_counts_ring_flows():
    spec = _spec("100Mbit", 9000, hosts_per_leaf=2)
    jobs = parse_workload([{"kind": "allreduce", "name": "ar", "ranks": "all", "size": "4MB"}])
    assert estimate(spec, jobs, TWO_CPUS).flows == 8


def test_scale_keep_divides_rates_only():
    raw = {
        "scale": 4000,
        "host_link": {"rate": "400Gbit", "buffer": "32MB", "mtu": 9000, "ecn": {"mode": "step", "k": "1MB"}},
        "fabric_link": {"rate": "800Gbit"},
        "overrides": [{"link": "l1-s1", "rate": "200Gbit"}],
    }
    emu, notes = apply_scale(raw)
    assert "scale" not in emu and raw["scale"] == 4000  # input untouched
    spec = FabricSpec.from_dict(emu)
    assert spec.host_link.rate_bps == 100_000_000 and spec.fabric_link.rate_bps == 200_000_000
    assert spec.host_link.buffer_bytes == 32 * 2**20 and spec.host_link.marking.k.value == 2**20
    assert emu["overrides"][0]["rate"] == "50Mbit"
    assert notes["factor"] == 4000 and notes["links"][0]["rate"] == {"real": "400Gbit", "emulated": "100Mbit"}
    assert any("propagation delay" in n for n in notes["not_scaled"])
    assert describe(notes)[0].startswith("scale 1/4000")


def test_scale_bdp_keeps_bdp_multiples():
    raw = {
        "scale": {"factor": 4000, "rtt": "10us", "emulated_rtt": "1ms"},
        "host_link": {"rate": "400Gbit", "buffer": "32MB", "mtu": 9000, "ecn": {"mode": "step", "k": "1MB"}},
    }
    emu, notes = apply_scale(raw)
    # real BDP 400G x 10us = 500,000 B; emulated 100M x 1ms = 12,500 B; 32 MB (2**25 B) = 67.1 BDP; K = 2.1 BDP
    spec = FabricSpec.from_dict(emu)
    assert spec.host_link.buffer_bytes == 838_861  # 2**25 * 12,500 / 500,000, rounded
    assert spec.host_link.marking.k.value == 26_214
    assert notes["links"][0]["buffer"]["bdp_multiple"] == 67.109
    assert notes["links"][0]["bdp_bytes"] == {"real": 500000, "emulated": 12500}


def test_scale_bdp_clamps_tiny_values():
    raw = {
        "scale": {"factor": 4000, "rtt": "10us", "emulated_rtt": "100us"},
        "host_link": {"rate": "400Gbit", "buffer": "1MB", "mtu": 9000},
    }
    emu, notes = apply_scale(raw)
    assert int(emu["host_link"]["buffer"]) == 2 * 9014 and notes["clamped"]


def test_scale_rejects_bad_values():
    with pytest.raises(SpecError, match=r"fabric\.scale\.factor"):
        apply_scale({"scale": 0.5})
    with pytest.raises(SpecError, match="rtt"):
        apply_scale({"scale": {"factor": 10, "buffers": "bdp"}})
    with pytest.raises(SpecError, match="unknown key"):
        apply_scale({"scale": {"factor": 10, "speed": 1}})


def test_no_scale_is_identity():
    raw = {"host_link": {"rate": "100Mbit"}}
    assert apply_scale(raw) == (raw, {})


def test_evaluate_run_on_a_record_directory(tmp_path):
    from results.record import RunRecord

    rec = RunRecord.create(tmp_path, "overload", scenario={"fabric": {"transport": {"gso_max_segs": 1}}})
    rec.update({"fabric": {"ports": PORTS}, "sampler_health": HEALTH})
    with rec.table("queues") as q:
        q.write_many(queue_trace(0.8))
    with rec.table("cpu") as c:
        c.write_many(cpu_trace(1.0))
    v = evaluate_run(rec.path)
    assert v["faithful"] is False
    assert {c["name"] for c in v["checks"] if c["ok"] is False} == {"bottleneck_rate", "cpu_saturation"}
    assert next(c for c in v["checks"] if c["name"] == "sampler")["ok"] is True
