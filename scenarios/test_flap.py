"""A flapping link costs a collective more than a stable degraded one: every down stalls the flow that crosses it
for the detection delay and a retransmission timeout, while a link at 90% of its rate only slows that flow.
This is why operators take a flapping link out of service (and why fabrics damp flaps) rather than let it flap.

Both points run the link-failure fabric and ring all-reduce; the ring flow into l2 crosses s1-l2 in every run
(L3 hashing, fixed seed). Flapping: 4 down/up cycles of 0.6 s, detection 100 ms. Degraded: 45 of 50 Mbit/s for
the same 2.4 s. Both points mark ECN (K = 30 KB), so the degraded link's queue stays short of its buffer and it
loses nothing: a loss there would cost the degraded point a retransmission timeout, which is the flap's own
mechanism, not a slower link's. The cost is each point's iteration time summed beyond its iterations' healthy
median. The runs are in docs/bench.md ("Scenario results behind the thresholds").

``TESTBED_REVERSED=1`` degrades the link at both points.
"""

from __future__ import annotations

import statistics

import pytest
from scenario_helpers import REVERSED, scenario_data

pytestmark = [pytest.mark.root]

_DEGRADE = scenario_data("flap")["sweep"]["events.0"][1]
REVERSED_OVERRIDES = {"flap": {"sweep": {"events.0": [_DEGRADE, _DEGRADE]}}}


@pytest.mark.full
def test_a_flapping_link_costs_more_than_a_degraded_one(judged):
    judged("flap", judge_flap, REVERSED_OVERRIDES)


def _cost(point):
    """(extra seconds over the healthy median, the worst iteration, the healthy median) of one point."""
    took = [i["t_end"] - i["t_start"] for i in point.table("iterations") if not i["warmup"]]
    healthy = statistics.median(took)
    return sum(t - healthy for t in took if t > healthy), max(took), healthy


def judge_flap(exp):
    flap, degraded = exp.points  # sweep order: the flap first
    got = {}
    for label, p in (("flapping", flap), ("degraded", degraded)):
        extra, worst, healthy = got[label] = _cost(p)
        events = [e["event"] for e in p.table("link_events")]
        print(
            f"{label} ({'flap' if 'down' in events else 'degrade'}): {extra:.3f} s over the healthy {healthy:.3f} s "
            f"per iteration; worst iteration {worst:.3f} s; events {events.count('down')} down, "
            f"{events.count('degrade')} degrade"
        )
    if not REVERSED:
        exp.expect("down" in [e["event"] for e in flap.table("link_events")], "the first point did not flap")
    exp.expect(
        degraded.summary["drops_total"] == 0,
        f"the degraded point dropped {degraded.summary['drops_total']:.0f} packets: marking did not hold its queue "
        "short of the buffer, so its cost mixes in loss recovery",
    )
    exp.expect(
        got["flapping"][0] > 2 * got["degraded"][0] + 0.1,
        f"flapping cost {got['flapping'][0]:.3f} s, degraded {got['degraded'][0]:.3f} s; expected flapping above "
        "twice the degraded link's cost plus 0.1 s",
    )
    exp.expect(
        got["flapping"][1] > 1.2 * got["degraded"][1],
        f"the worst flapping iteration took {got['flapping'][1]:.3f} s, the worst degraded {got['degraded'][1]:.3f} "
        "s; expected a stall (1.2 x)",
    )
