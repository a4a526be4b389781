"""The direct fidelity check (dequeue gaps against the ideal transmission time) on canned telemetry (no root)."""

from __future__ import annotations

import math

from results.fidelity import evaluate, format_verdict
from results.fidelity.gaps import HALF, check_dequeue_gaps, late_edge, port_gaps, quantile_edge
from tests.unit.test_fidelity import HEALTH, PORTS, cpu_trace, queue_trace

RATE = 100e6  # PORTS: 100 Mbit/s, MTU 1500: a frame every 121.1 us


def _hist(early: dict[int, int], late: dict[int, int]) -> list[int]:
    h = [0] * (2 * HALF)
    for b, c in early.items():
        h[b] = c
    for b, c in late.items():
        h[HALF + b] = c
    return h


def _health(late_far: int, n: int = 10_000, port: str = "s1:s1-l2") -> dict:
    """``n`` gaps at ``port``: most within 4-8 us, ``late_far`` late by 64-128 us (bucket 7, at the 64 us edge)."""
    hist = _hist({3: n // 2}, {3: n - n // 2 - late_far, 7: late_far})
    return {"source": "bpf", "ports": {port: {"gap_n": n, "gap_hist": hist, "gap_mean_abs_us": 5.0}}}


def test_the_late_edge_is_the_power_of_two_at_or_below_a_frame_time() -> None:
    assert late_edge(121.1) == (7, 64.0)  # 1514 B at 100 Mbit/s
    assert late_edge(1442.2) == (11, 1024.0)  # 9014 B at 50 Mbit/s
    assert late_edge(1024.0) == (11, 1024.0)
    assert late_edge(0.5) == (1, 1.0)
    assert late_edge(1e9)[0] == HALF - 1


def test_quantile_edges_bound_the_quantile_from_above() -> None:
    hist = [0, 0, 0, 90, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0]
    assert quantile_edge(hist, 0.5) == 8.0  # bucket 3: [4, 8) us
    assert quantile_edge(hist, 0.99) == 128.0  # bucket 7: [64, 128) us
    assert quantile_edge([0] * 15 + [3], 0.5) == math.inf  # the open last bucket
    assert quantile_edge([0] * 16, 0.5) == 0.0


def test_port_gaps_counts_the_late_share_from_the_edge() -> None:
    g = port_gaps(_health(200)["ports"]["s1:s1-l2"], RATE, 1500)
    assert g is not None
    assert g["late_edge_us"] == 64.0 and g["late_share"] == 0.02 and g["early_share"] == 0.5
    assert g["late_p99_us_at_most"] == 128.0
    assert port_gaps({"gap_n": 0, "gap_hist": [0] * 32}, RATE, 1500) is None


def test_packets_on_time_pass_and_late_ones_fail() -> None:
    on_time = check_dequeue_gaps(_health(50), PORTS)  # 0.5 %
    assert on_time["ok"] is True and on_time["value"] == 0.005
    late = check_dequeue_gaps(_health(500), PORTS)  # 5 %
    assert late["ok"] is False and "s1:s1-l2" in late["reason"] and "later than the link" in late["reason"]


def test_not_judged_without_telemetry_or_a_busy_port() -> None:
    assert check_dequeue_gaps(None, PORTS)["ok"] is None
    few = check_dequeue_gaps(_health(50, n=500), PORTS)
    assert few["ok"] is None and "most 500" in few["reason"]
    unknown = check_dequeue_gaps(_health(50, port="x9:x9-y"), PORTS)  # not a port of the fabric
    assert unknown["ok"] is None


def test_packets_on_time_turn_cpu_saturation_into_a_warning() -> None:
    v = evaluate(queue_trace(0.99), [], cpu_trace(1.0), PORTS, HEALTH, qtelem_health=_health(50))
    cpu = next(c for c in v["checks"] if c["name"] == "cpu_saturation")
    assert cpu["ok"] is False and cpu["waived_by"] == "dequeue_gap"  # recorded as it was
    assert v["faithful"] is True and v["failed"] == []
    assert len(v["warnings"]) == 1 and v["warnings"][0].startswith("cpu_saturation:")
    assert "warn cpu_saturation" in format_verdict(v)


def test_late_packets_leave_cpu_saturation_a_failure() -> None:
    v = evaluate(queue_trace(0.99), [], cpu_trace(1.0), PORTS, HEALTH, qtelem_health=_health(500))
    assert v["faithful"] is False and "warnings" not in v
    assert [f.split(":")[0] for f in v["failed"]] == ["cpu_saturation", "dequeue_gap"]


def test_without_the_kernel_telemetry_the_verdict_is_as_before() -> None:
    v = evaluate(queue_trace(0.99), [], cpu_trace(1.0), PORTS, HEALTH)
    assert v["faithful"] is False and "dequeue_gap" not in {c["name"] for c in v["checks"]}


def test_the_kernels_exact_count_is_used_where_the_record_has_it() -> None:
    stats = {**_health(200)["ports"]["s1:s1-l2"], "gap_late": 30, "gap_late_us": 121.1}
    g = port_gaps(stats, RATE, 1500)
    assert g is not None and g["late_exact"] is True
    assert g["late_share"] == 0.003 and g["late_edge_us"] == 121.1  # not the histogram's 200 from 64 us
    old = port_gaps(_health(200)["ports"]["s1:s1-l2"], RATE, 1500)
    assert old is not None and old["late_exact"] is False and old["late_share"] == 0.02


def _exact(late: int, n: int = 10_000, port: str = "s1:s1-l2") -> dict:
    """``n`` gaps at ``port`` of which the kernel counted ``late`` late by a frame time, in 100 us slots."""
    hist = _hist({3: n // 2}, {3: n - n // 2 - late, 7: late})
    stats = {"gap_n": n, "gap_hist": hist, "gap_mean_abs_us": 5.0, "gap_late": late, "gap_late_us": 121.1}
    return {"source": "bpf", "slot_us": 100.0, "ports": {port: stats}}


def _slots(late_at: dict[float, int], port: str = "s1:s1-l2") -> list[dict]:
    node, dev = port.split(":")
    return [{"t": t, "node": node, "dev": dev, "late": n} for t, n in late_at.items()]


def test_late_gaps_during_a_machine_stall_are_set_apart_and_the_rest_judged() -> None:
    from results.fidelity.machine import StallEvent

    stall = StallEvent(10.0, 10.012, (0,), 0.0)  # a CPU stopped for 12 ms
    slots = _slots({10.0001: 300, 10.01205: 100, 15.0: 40})  # in it, the slot after its end, and far from it
    c = check_dequeue_gaps(_exact(440), PORTS, qslots=slots, stalls=[stall])
    d = c["details"]["s1:s1-l2"]
    assert d["late_in_stalls"] == 400 and d["late_share"] == 0.004  # the 40 far from any stall are judged
    assert c["ok"] is True and "400 late gaps during machine stalls set apart" in c["reason"]
    alone = check_dequeue_gaps(_exact(440), PORTS, qslots=slots)  # no stall seen: every late gap judged
    assert alone["ok"] is False and alone["details"]["s1:s1-l2"]["late_in_stalls"] == 0
    late = check_dequeue_gaps(_exact(540), PORTS, qslots=_slots({10.0001: 300, 15.0: 240}), stalls=[stall])
    assert late["ok"] is False and late["value"] == 0.024  # 240 late gaps no stall explains
