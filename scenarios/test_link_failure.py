"""A spine link fails during a ring all-reduce: the iteration it hits stalls for the routing's detection delay and
then for TCP's retransmission timer, and the rerouted fabric runs at its ideal time again.

Reproduces what operators of AI fabrics report: a collective stalls until routing converges around a failed link
(hence BFD timers of tens of milliseconds), and longer still because the flows caught on the dead path wait for
their backed-off retransmission timeout (RFC 6298: it doubles on every expiry) before they resume. The ring
flow into the far leaf takes the failed spine in every run (L3 hashing with a fixed seed). After the reroute every
iteration should take the healthy fabric's time (one spine link per leaf carries a ring). The runs are in
docs/bench.md ("Scenario results behind the thresholds").

``TESTBED_REVERSED=1`` gives both points the same 100 ms detection delay.
"""

from __future__ import annotations

import statistics

import pytest
from scenario_helpers import REVERSED

pytestmark = [pytest.mark.root]

REVERSED_OVERRIDES = {"link_failure": {"sweep": {"events.0.detection": ["100ms", "100ms"]}}}


@pytest.mark.full
def test_a_failed_link_stalls_for_detection_plus_retransmission(judged):
    judged("link_failure", judge_failure, REVERSED_OVERRIDES)


def _stall(point):
    """(detection s, stall s, healthy median s, median after the reroute s) of one point."""
    events = point.table("link_events")
    down = next(e for e in events if e["event"] == "down")
    rerouted = next(e for e in events if e["event"] == "rerouted" and e["t"] > down["t"])
    up = next(e for e in events if e["event"] == "up")
    iters = [i for i in point.table("iterations") if not i["warmup"]]
    took = [(i["t_start"], i["t_end"], i["t_end"] - i["t_start"]) for i in iters]
    hit = [d for s, e, d in took if s <= down["t"] <= e]
    clean = [d for s, e, d in took if not s <= down["t"] <= e and not s <= up["t"] + 1 <= e]
    after = [d for s, e, d in took if s > rerouted["t"] + 0.5 and e < up["t"]]
    assert hit and clean and after, (point.variant, len(hit), len(clean), len(after))
    healthy = statistics.median(clean)
    return rerouted["after_s"], max(hit) - healthy, healthy, statistics.median(after)


def judge_failure(exp):
    if REVERSED:  # 100 ms at both points: the second in sweep order stands in for the 1 s detection
        fast, slow = exp.points
    else:
        fast, slow = exp.where(detection="100ms"), exp.where(detection="1s")
    got = {}
    for label, p in (("fast", fast), ("slow", slow)):
        detect, stall, healthy, after = got[label] = _stall(p)
        print(
            f"{label} ({p.variant}): rerouted {detect * 1e3:.0f} ms after the failure; the iteration it hit took "
            f"{stall:.3f} s longer than the healthy {healthy:.3f} s; after the reroute {after:.3f} s"
        )
        exp.expect(stall >= detect, f"{label}: the stall {stall:.3f} s is shorter than the detection {detect:.3f} s")
        exp.expect(
            stall <= 2 * detect + 0.6,
            f"{label}: the stall {stall:.3f} s is above twice the detection {detect:.3f} s plus 0.6 s (RTO backoff)",
        )
        exp.expect(
            abs(after / healthy - 1) < 0.05,
            f"{label}: iterations after the reroute took {after:.3f} s against {healthy:.3f} s healthy (> 5% apart)",
        )
    exp.expect(
        got["slow"][1] > got["fast"][1] + 0.5,
        f"the stall grew from {got['fast'][1]:.3f} s to {got['slow'][1]:.3f} s with the detection delay; expected "
        "at least 0.5 s more",
    )
