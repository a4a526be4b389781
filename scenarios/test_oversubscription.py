"""Oversubscription 1:1 vs 2:1 vs 3:1 under a cross-rack ring all-reduce (scenarios/oversubscription.yaml).

Reproduces the rule of thumb ("oversubscription 3:1 slows cross-rack collectives by up to 3x when
all racks talk at once"), from the bandwidth bound: every leaf sends and receives 2 host links' worth (2 x B) of
ring traffic through uplinks of 2B / r, so the iteration time is about r times the non-blocking one.

Thresholds: every step of the sweep at least 1.25 x the previous one, and t(r)/t(1:1) within [0.75, 1.2] x r (the
p50, so one iteration slowed by retransmissions does not decide). ``TESTBED_REVERSED=1`` runs all three points at
1:1 (``REVERSED_OVERRIDES``), so the growth assertion fails. The runs behind the thresholds are in docs/bench.md
("Scenario results behind the thresholds").
"""

import pytest

from testbed.spec.fabric import parse_ratio

pytestmark = [pytest.mark.root, pytest.mark.quick]

REVERSED_OVERRIDES = {"oversubscription": {"sweep": {"fabric.oversubscription": ["1:1", "1:1", "1:1"]}}}


def _ratio(p) -> float:
    return float(parse_ratio(p.variant["fabric.oversubscription"], "ratio"))


def judge(exp):
    pts = sorted(exp.points, key=_ratio)  # 1:1, 2:1, 3:1 (REVERSED: three 1:1 points, in sweep order)
    exp.expect(len(pts) == 3, f"expected 3 points, got {[p.variant for p in pts]}")
    ratio = [_ratio(p) for p in pts]
    t = [p["coll_iter_p50_s"] for p in pts]
    shown = ", ".join(f"{p.variant['fabric.oversubscription']}: {x:.3f} s" for p, x in zip(pts, t))
    print(f"\noversubscription: iteration p50 {shown}; t/t(1:1) {', '.join(f'{x / t[0]:.2f}' for x in t)}")
    for i in range(1, len(t)):
        exp.expect(
            t[i] > 1.25 * t[i - 1],
            f"iteration time does not grow with the oversubscription: p50 {shown} "
            f"(point {i} is {t[i] / t[i - 1]:.2f} x point {i - 1}, expected > 1.25 x)",
        )
    for i in range(1, len(t)):
        expected = ratio[i] / ratio[0]
        got = t[i] / t[0]
        exp.expect(
            0.75 * expected <= got <= 1.2 * expected,
            f"t({pts[i].variant['fabric.oversubscription']}) / t(1:1) = {got:.2f}, expected about {expected:.1f} "
            f"(within [{0.75 * expected:.2f}, {1.2 * expected:.2f}]): p50 {shown}",
        )


def test_iteration_time_grows_with_oversubscription(judged):
    judged("oversubscription", judge, REVERSED_OVERRIDES)
