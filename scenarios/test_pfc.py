"""Lossless classes: PFC-style pause, as RoCEv2 fabrics run it.

Reproduces:
- priority flow control makes an incast lossless, at the cost of head-of-line blocking. A pause stops a port's
  whole class, so a flow that shares a paused port with the incast, but not its bottleneck, is held back too (the
  "victim flow" of PFC's congestion spreading; scenarios/pfc_incast.yaml);
- PFC plus ECN (the DCQCN-era recipe): marking below XOFF slows the senders before the queue needs a pause, and
  cuts the pause time (scenarios/pfc_ecn.yaml).

``TESTBED_REVERSED=1`` turns the class lossless at the second point instead of the first, and marks ECN at the
first point instead of the second.
"""

from __future__ import annotations

import pytest
from scenario_helpers import payload_bps

pytestmark = [pytest.mark.root]

REVERSED_OVERRIDES = {
    "pfc_incast": {"sweep": {"fabric.host_link.classes.0.lossless": [False, {"xoff": "40KB", "xon": "20KB"}]}},
    "pfc_ecn": {"sweep": {"fabric.host_link.classes.0.ecn": [{"mode": "step", "k": "30KB"}, "off"]}},
}


def test_pfc_makes_an_incast_lossless_and_holds_back_a_victim(judged):
    judged("pfc_incast", judge_pfc, REVERSED_OVERRIDES)


def test_ecn_below_xoff_cuts_the_pause_time(judged):
    judged("pfc_ecn", judge_pfc_ecn, REVERSED_OVERRIDES)


def _drops(point) -> int:
    return sum(int(r["drops"]) for r in point.table("classes") if r["class"] == "rdma")


def judge_pfc(exp):
    pfc, lossy = exp.points  # sweep order: rdma lossless, then not
    port = payload_bps(pfc.param("fabric.host_link"))
    seen = {}
    for label, p in (("lossless", pfc), ("lossy", lossy)):
        goodput = {f["job"]: f["goodput_bps"] for f in p.table("flows")}
        incast = sum(v for k, v in goodput.items() if k.startswith("in")) / port
        pauses = len(p.table("pauses")) if p.manifest.get("pfc") else 0
        seen[label] = (_drops(p), incast, goodput["victim"] / port, pauses)
        print(
            f"{label} ({p.variant}): rdma drops {seen[label][0]}, incast {incast:.3f} of the receiver's port, "
            f"victim {seen[label][2]:.3f} of its own, {pauses} pauses"
        )
    (d_pfc, in_pfc, v_pfc, n_pfc), (d_lossy, _, v_lossy, _) = seen["lossless"], seen["lossy"]
    exp.expect(d_pfc == 0 and n_pfc > 0, f"lossless: {d_pfc} drops and {n_pfc} pauses; expected 0 drops, pauses")
    exp.expect(d_lossy > 0, f"without lossless the incast dropped {d_lossy} packets; expected drops")
    exp.expect(in_pfc > 0.9, f"lossless: the incast used {in_pfc:.3f} of the receiver's port; expected > 0.9")
    exp.expect(
        v_pfc < 0.5 * v_lossy,
        f"the victim ran at {v_pfc:.3f} of its port under PFC against {v_lossy:.3f} without; expected under half "
        "(the pauses of the ports it shares with the incast hold it back)",
    )


def judge_pfc_ecn(exp):
    pfc, marked = exp.points  # sweep order: PFC alone, then PFC with ECN on the class
    seen = {}
    for label, p in (("PFC alone", pfc), ("PFC + ECN", marked)):
        pause_s = sum(float(r["duration_s"]) for r in p.table("pauses"))
        marks = sum(int(r["marks"]) for r in p.table("marks")) if p.table("marks") else 0
        seen[label] = (_drops(p), pause_s, marks)
        print(f"{label} ({p.variant}): rdma drops {seen[label][0]}, {pause_s:.2f} pause-seconds, {marks} CE marks")
    (d0, s0, _), (d1, s1, m1) = seen["PFC alone"], seen["PFC + ECN"]
    exp.expect(d0 == 0 and d1 == 0, f"the lossless class dropped {d0} and {d1} packets; expected 0 at both points")
    exp.expect(m1 > 0, f"the class marked {m1} packets with ECN on; expected marks")
    exp.expect(
        s1 < 0.6 * s0,
        f"{s1:.2f} pause-seconds with ECN against {s0:.2f} without; expected under 0.6 x (marking below XOFF)",
    )
