"""Traffic classes: strict priority and weighted shares, as production AI fabrics configure them.

Reproduces:
- Strict priority for latency-sensitive traffic (the CNP and control classes of RoCE fabrics; 802.1Qaz's strict
  classes): a small request/response in a strict-priority class keeps its unloaded latency tail while a bulk
  all-reduce fills the same ports, because it waits at most for the frame on the wire at each hop; in the bulk's
  class it waits behind the bulk's queue (scenarios/qos_priority.yaml).
- Weighted shares (802.1Qaz ETS, WRR/DRR): two backlogged classes on one congested port get the port in the
  ratio of their weights (scenarios/qos_weights.yaml).

``TESTBED_REVERSED=1`` sends the loaded probe in the bulk's class at both points, and gives both classes weight 1.
"""

from __future__ import annotations

import numpy as np
import pytest
from scenario_helpers import payload_bps

pytestmark = [pytest.mark.root]

EQUAL = [{"name": "gold", "dscp": [10], "weight": 1}, {"name": "be", "dscp": [0], "weight": 1}]
REVERSED_OVERRIDES = {
    "qos_priority": {"sweep": {"workload.2.dscp": [0, 0]}},
    "qos_weights": {"fabric.host_link.classes": EQUAL},
}


def test_strict_priority_keeps_small_messages_near_their_unloaded_latency(judged):
    judged("qos_priority", judge_priority, REVERSED_OVERRIDES)


def test_weights_split_a_congested_port_in_their_ratio(judged):
    judged("qos_weights", judge_weights, REVERSED_OVERRIDES)


def _p99_ms(point, job: str) -> float:
    rtts = [r["rtt_s"] for r in point.table("rtt") if r["job"] == job and r["rtt_s"] is not None]
    return float(np.percentile(rtts, 99)) * 1e3


def judge_priority(exp):
    ctrl, be = exp.points  # sweep order: the loaded probe in ctrl (DSCP 46), then in best effort
    p99 = {}
    for label, p in (("ctrl", ctrl), ("be", be)):
        p99[label] = (_p99_ms(p, "unloaded"), _p99_ms(p, "loaded"))
        iters = [r for r in p.table("iterations") if not r["warmup"]]
        busy = np.mean([(r["t_end"] - r["t_start"]) / r["ideal_s"] for r in iters])
        print(
            f"loaded probe in {label} ({p.variant}): RTT p99 unloaded {p99[label][0]:.2f} ms, loaded "
            f"{p99[label][1]:.2f} ms; all-reduce iterations at {busy:.2f} x ideal"
        )
    unloaded, in_ctrl = p99["ctrl"]
    in_be = p99["be"][1]
    link = ctrl.param("fabric.host_link")
    frame_ms = (link["mtu"] + 14) * 8 / link["rate_bps"] * 1e3
    bound = unloaded + 8 * frame_ms  # non-preemptive: a frame on the wire at each of 4 hops, both ways
    exp.expect(
        in_ctrl < bound,
        f"in the strict class the loaded RTT p99 was {in_ctrl:.2f} ms against {unloaded:.2f} ms unloaded; expected "
        f"under {bound:.2f} ms (unloaded + one {frame_ms:.2f} ms frame at each of the 8 ports it crosses)",
    )
    exp.expect(
        in_be > 4 * in_ctrl,
        f"in the bulk's class the loaded RTT p99 was {in_be:.2f} ms against {in_ctrl:.2f} ms in the strict class; "
        "expected over 4 x (the all-reduce's queue in front of it)",
    )


def judge_weights(exp):
    (p,) = exp.points
    goodput = {f["job"]: f["goodput_bps"] for f in p.table("flows")}
    ratio = goodput["gold"] / goodput["be"]
    total = (goodput["gold"] + goodput["be"]) / payload_bps(p.param("fabric.host_link"))
    print(
        f"gold {goodput['gold'] / 1e6:.1f} Mbit/s, best effort {goodput['be'] / 1e6:.1f} Mbit/s: ratio {ratio:.3f} "
        f"(weights 3:1), together {total:.3f} of the port"
    )
    exp.expect(abs(ratio - 3.0) <= 0.3, f"gold/best effort {ratio:.3f}; expected 3 within 10% (weights 3:1)")
    exp.expect(total > 0.9, f"the two classes used {total:.3f} of the port; expected it full (> 0.9)")
