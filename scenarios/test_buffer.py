"""Buffer depth: drops vs queueing delay, and the buffer-sizing rule.

Reproduces:
- the buffer-depth trade-off (mission.md, "Reference results"): deeper drop-tail buffers cut drops but add a
  queueing delay of buffer / rate to every packet behind them. With long TCP flows keeping the bottleneck queue
  full, the RTT under load is about buffer * 8 / rate (+ the base RTT, ~0.5 ms here).
- the buffer-sizing rule of Appenzeller, Keslassy and McKeown ("Sizing Router Buffers", SIGCOMM 2004): with n long
  desynchronized flows, a buffer of RTT x C / sqrt(n) keeps the bottleneck near full utilization (they report
  ~98-99%). That needs a real RTT (netem delay), which this machine's kernel lacks: the test skips natively with
  the capability probe's reason and runs in the guest kernel mode (marker ``stock_kernel``).

``TESTBED_REVERSED=1`` reverses the buffer order of the depth sweep (the test then fails).
"""

from __future__ import annotations

import itertools
import math

import pytest
from scenario_helpers import REVERSED

from conftest import load

RATE = 100e6
PAYLOAD = RATE * (9000 - 52) / (9000 + 14)
BASE_RTT_S = 0.5e-3
MIN_TCP_BUFFER = 10 * 9014  # bytes: below ~10 jumbo frames the flows sit in timeouts


@pytest.mark.root
@pytest.mark.full
def test_deeper_buffers_drop_less_and_delay_more(experiment):
    data = load("buffer")
    if REVERSED:
        data["sweep"]["fabric.host_link.buffer"] = list(reversed(data["sweep"]["fabric.host_link.buffer"]))
    exp = experiment("buffer", data=data)
    pts = exp.points
    bufs = [_buffer_bytes(p) for p in pts]
    for b, p in zip(bufs, pts, strict=True):
        print(
            f"buffer {b / 1e3:.0f} KB: drops {p.queue('l1:l1-l1h1')['drops']:.0f} timeouts {p['timeouts_total']:.0f} retrans {p['retrans_total']:.0f} "
            f"rtt p50 {p['rtt_p50_s'] * 1e3:.1f} ms p99 {p['rtt_p99_s'] * 1e3:.1f} ms (buffer/rate "
            f"{b * 8 / RATE * 1e3:.1f} ms) goodput {p['goodput_bps'] / 1e6:.1f} Mbit/s"
        )
    port = "l1:l1-l1h1"
    drops = [float(p.queue(port)["drops"] or 0) for p in pts]
    for i in range(1, len(pts)):
        b0, b1, p0, p1 = bufs[i - 1], bufs[i], pts[i - 1], pts[i]
        # A buffer of a few jumbo frames (30 KB = 3) leaves the flows in retransmission timeouts, sending less, so it
        # can drop fewer packets than 100 KB (measured 466-566 vs 940-1048, with 61-71 vs 36-40 timeouts): there
        # the timeouts are judged, from 10 frames up the drops.
        if b0 >= MIN_TCP_BUFFER:
            exp.expect(
                drops[i] < drops[i - 1],
                f"drops at {port} did not fall from {drops[i - 1]:.0f} ({b0 / 1e3:.0f} KB) to {drops[i]:.0f} "
                f"({b1 / 1e3:.0f} KB)",
            )
        exp.expect(
            p1["timeouts_total"] <= p0["timeouts_total"] + 1,
            f"retransmission timeouts rose from {p0['timeouts_total']:.0f} ({b0 / 1e3:.0f} KB) to "
            f"{p1['timeouts_total']:.0f} ({b1 / 1e3:.0f} KB)",
        )
        exp.expect(
            p1["rtt_p99_s"] > 1.5 * p0["rtt_p99_s"],
            f"RTT p99 under load did not rise from {b0 / 1e3:.0f} KB ({p0['rtt_p99_s'] * 1e3:.1f} ms) to "
            f"{b1 / 1e3:.0f} KB ({p1['rtt_p99_s'] * 1e3:.1f} ms); expected above 1.5 x",
        )
    exp.expect(
        drops[-1] < 0.5 * drops[0],
        f"drops at {port} with {bufs[-1] / 1e3:.0f} KB ({drops[-1]:.0f}) not below 0.5 x those with "
        f"{bufs[0] / 1e3:.0f} KB ({drops[0]:.0f})",
    )
    for b, p in zip(bufs, pts, strict=True):
        expected = b * 8 / RATE + BASE_RTT_S
        exp.expect(
            0.6 * expected <= p["rtt_p99_s"] <= 1.4 * expected + 2e-3,
            f"RTT p99 with a {b / 1e3:.0f} KB buffer is {p['rtt_p99_s'] * 1e3:.1f} ms, expected about buffer*8/rate "
            f"+ base = {expected * 1e3:.1f} ms (0.6x .. 1.4x + 2 ms)",
        )
        exp.expect(
            p["goodput_bps"] > 0.85 * PAYLOAD,
            f"goodput with a {b / 1e3:.0f} KB buffer {p['goodput_bps'] / 1e6:.1f} Mbit/s below 0.85 x payload rate",
        )


def _buffer_bytes(p) -> int:
    from testbed.units import parse_size

    value = p.variant["fabric.host_link.buffer"]
    return parse_size(value).to_bytes(9000)


# --- buffer sizing: needs netem (delay) -----------------------------------------------------------------------
RTT_S = 0.080  # 40 ms each way on l1 - l1h1 (buffer_sizing.yaml)
N_FLOWS = 4
SIZING_RATE = 25e6  # buffer_sizing.yaml: 25 Mbit/s, half what the software-emulated guest reproduces at MTU 9000
BOTTLENECK = "l1:l1-l1h1"
SKIP_S = 2.0  # after the last flow starts: slow start and the first loss are over
RTT_EXTRA_MAX_S = 0.010  # the smallest srtt may exceed the netem RTT by this much (guest: 1.4-3.3 ms measured)
# Utilization is the bottleneck's steady state: wire bytes out of l1 -> l1h1 while all 4 flows run (from SKIP_S
# after the last start), over its shaped rate. Thresholds for n = 4 flows in the TCG guest, not the 98-99 % AKM
# report for many desynchronized flows: one guest pass measured 0.826 / 0.910 / 0.955 / 0.977 at B/4 / B/2 / B / 2B
# (8 s flows; smallest srtt 41.4-43.3 ms): the rule's buffer is near full, a quarter of it is clearly short, twice it
# buys little. At B over nine guest passes: 0.946-0.976 in six, 0.904 / 0.917 / 0.934 in three taken in one afternoon
# hour when the host itself ran slower (its native sampler too); the floor sits below those, and the quarter and double
# checks carry the rule's shape. Those passes ran at 50 Mbit/s and RTT 40 ms; a CI pass at 17:30 UTC read 0.750 /
# 0.825 / 0.843 / 0.931, every take faithful: the guest short of CPU drains the small buffers. Since then 25 Mbit/s
# and RTT 80 ms: the same C x RTT (250 KB) and buffers, half the frames per second; one guest pass in the next hour
# read 0.863 / 0.930 / 0.969 / 0.999 (smallest srtt 81.5-83.3 ms).
AT_RULE_MIN = 0.88
QUARTER_GAP_MIN = 0.06  # utilization at B minus at B/4
DOUBLE_GAIN_MAX = 0.05  # utilization at 2B minus at B
MONOTONE_SLACK = 0.03


@pytest.mark.root
@pytest.mark.full
@pytest.mark.stock_kernel
def test_buffer_sizing_rule(experiment):
    from scenario_helpers import port_utilization, srtt_min_s, steady_window

    from testbed.capabilities import NEEDS, probe

    caps = probe()
    if not caps.get("qdisc.netem"):
        need = next(n for n in NEEDS if n.key == "qdisc.netem")
        pytest.skip(
            f"buffer sizing needs a real RTT from link delay: {need.what} is missing on this kernel "
            f"({caps.get('kernel')}); run it in the guest kernel mode: "
            "python3 -m testbed vm -- /usr/bin/python3 -m pytest -m stock_kernel scenarios"
        )
    data = load("buffer_sizing")
    rule = RTT_S * SIZING_RATE / 8 / math.sqrt(N_FLOWS)  # bytes: 125 KB
    exp = experiment("buffer_sizing", data=data)
    rows = []
    for p in exp.points:
        b = _buffer_bytes(p)
        util = port_utilization(p.path, BOTTLENECK, steady_window(p.path, SKIP_S))
        rtt = srtt_min_s(p.path)
        rows.append((b, util))
        print(
            f"buffer {b / 1e3:.0f} KB ({b / rule:.2f} x RTT*C/sqrt(n)): utilization {util:.3f}, srtt min {rtt * 1e3:.1f} ms"
        )
        exp.expect(
            RTT_S <= rtt <= RTT_S + RTT_EXTRA_MAX_S,
            f"the smallest srtt at {b / 1e3:.0f} KB is {rtt * 1e3:.1f} ms, not the {RTT_S * 1e3:.0f} ms netem RTT "
            f"(+ up to {RTT_EXTRA_MAX_S * 1e3:.0f} ms): the delay is not what the rule is computed for",
        )
    rows.sort()
    for (b0, u0), (b1, u1) in itertools.pairwise(rows):
        exp.expect(
            u1 >= u0 - MONOTONE_SLACK,
            f"utilization fell from {u0:.3f} at {b0 / 1e3:.0f} KB to {u1:.3f} at {b1 / 1e3:.0f} KB "
            f"(more than {MONOTONE_SLACK} run-to-run noise)",
        )
    at_rule = next(u for b, u in rows if abs(b - rule) < 0.05 * rule)
    quarter = next(u for b, u in rows if abs(b - rule / 4) < 0.05 * rule / 4)
    double = next(u for b, u in rows if abs(b - 2 * rule) < 0.05 * 2 * rule)
    where = f"RTT {RTT_S * 1e3:.0f} ms, C {SIZING_RATE / 1e6:.0f} Mbit/s, n {N_FLOWS}, rule {rule / 1e3:.0f} KB"
    exp.expect(at_rule >= AT_RULE_MIN, f"utilization {at_rule:.3f} at RTT*C/sqrt(n) below {AT_RULE_MIN} ({where})")
    exp.expect(
        at_rule - quarter >= QUARTER_GAP_MIN,
        f"a quarter of the rule's buffer cost only {at_rule - quarter:.3f} utilization ({quarter:.3f} vs "
        f"{at_rule:.3f}); expected >= {QUARTER_GAP_MIN}: the buffer does not matter, so the RTT is not real ({where})",
    )
    exp.expect(
        double <= at_rule + DOUBLE_GAIN_MAX,
        f"doubling the rule's buffer raised utilization from {at_rule:.3f} to {double:.3f}, more than "
        f"{DOUBLE_GAIN_MAX}: RTT*C/sqrt(n) was not enough ({where})",
    )
