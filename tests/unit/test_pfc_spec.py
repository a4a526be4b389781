"""PFC-style lossless classes, the parts that need no kernel: the spec, where pauses act and the headroom check
(testbed.fabric.pfc), the tbf leaf and its netlink change, the controller's bookkeeping, and the guardrails."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from results.fidelity import check_bottlenecks, pause_intervals, paused_time
from results.fidelity.pfc import check_pfc
from testbed.fabric import tc
from testbed.fabric.checks import check_spec
from testbed.fabric.pfc import REACTION_BOUND_S, check_headroom, pfc_plan
from testbed.host.capabilities import Capabilities, CapabilityError
from testbed.pfc.book import PauseBook
from testbed.pfc.tbfmsg import RTM_NEWQDISC, ack_error, tbf_change
from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.topology import Topology
from tests.unit.test_doctor_ownership import PROBED


def _classes(xoff: str = "40KB", **lossless: Any) -> list[dict[str, Any]]:
    return [
        {"name": "rdma", "dscp": [26], "weight": 1, "lossless": {"xoff": xoff, **lossless}},
        {"name": "be", "dscp": [0], "weight": 1},
    ]


def _fabric(classes: Any = None, buffer: str = "300KB", hosts: int = 2) -> FabricSpec:
    host_link = {"rate": "50Mbit", "buffer": buffer, "mtu": 9000, "classes": classes or _classes()}
    return FabricSpec.from_dict(
        {"spines": 1, "leaves": 2, "hosts_per_leaf": hosts, "host_link": host_link, "fabric_link": {"rate": "100Mbit"}}
    )


def test_lossless_parses_with_xon_half_of_xoff() -> None:
    rdma = _fabric().host_link.classes[0]
    assert rdma.lossless is not None and (rdma.lossless.xoff.value, rdma.lossless.xon.value) == (40_960, 20_480)
    assert _fabric(_classes("4pkt", xon="2pkt")).host_link.classes[0].lossless.xon.unit == "packets"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("classes", "buffer", "where", "why"),
    [
        (_classes(xon="40KB"), "300KB", "lossless.xon", "below xoff"),
        (_classes("300KB"), "300KB", "lossless.xoff", "not below the class's buffer"),
        (_classes(pause="1ms"), "300KB", "lossless", "pause"),
    ],
)
def test_bad_thresholds_name_their_key(classes: Any, buffer: str, where: str, why: str) -> None:
    with pytest.raises(SpecError) as err:
        _fabric(classes, buffer)
    assert where in str(err.value) and why in str(err.value)


def test_plan_watches_router_queues_and_pauses_the_ports_that_feed_them() -> None:
    topo = Topology(_fabric())
    plan = pfc_plan(topo.ports())
    assert {q.router for q in plan.queues} == {"l1", "l2", "s1"}  # hosts hold no router queue
    assert all(q.xoff == 40_960 and q.xon == 20_480 and q.minor == 0x11 for q in plan.queues)
    l1 = sorted((f.upstream, f.bit) for f in plan.feeds if f.router == "l1")
    assert l1 == [("l1h1", 0), ("l1h2", 1), ("s1", 2)]  # bits per router, in port order
    s1_feed = next(f for f in plan.feeds if f.upstream == "s1" and f.router == "l1")
    assert (s1_feed.rate_bps, s1_feed.frame, s1_feed.upstream_minor) == (100_000_000, 9014, 0x11)
    assert s1_feed.headroom == int(REACTION_BOUND_S * 100e6 / 8) + 2 * 9014


def test_a_buffer_without_headroom_is_refused_with_the_numbers() -> None:
    # l1->l1h1 is fed by l1h2 (50 Mbit/s) and s1 (100 Mbit/s): 40 KB + (12.5 KB + 18 KB) + (25 KB + 18 KB)
    topo = Topology(_fabric(buffer="110KB"))
    with pytest.raises(SpecError) as err:
        check_headroom(pfc_plan(topo.ports()))
    msg = str(err.value)
    assert "class rdma" in msg and "112640 bytes" in msg and "2 ingress ports" in msg
    check_headroom(pfc_plan(Topology(_fabric(buffer="120KB")).ports()))


def test_check_spec_refuses_lossless_classes_without_tbf() -> None:
    caps = Capabilities.from_dict({**PROBED, "qdisc.bfifo": True, "cc.cubic": True, "qdisc.tbf": False})
    with pytest.raises(CapabilityError, match="tbf"):
        check_spec(_fabric(), caps)


def test_two_lossless_classes_on_one_dscp_at_a_router_are_refused() -> None:
    spec = _fabric()
    other = FabricSpec.from_dict(
        {
            "spines": 1,
            "leaves": 2,
            "hosts_per_leaf": 2,
            "host_link": {"rate": "50Mbit", "buffer": "300KB", "mtu": 9000, "classes": _classes()},
            "fabric_link": {
                "rate": "100Mbit",
                "classes": [{"name": "be", "dscp": [0], "weight": 1}, *_classes()[:1]],
            },
        }
    )
    pfc_plan(Topology(spec).ports())
    with pytest.raises(SpecError, match="list their lossless classes alike"):
        pfc_plan(Topology(other).ports())


def test_a_lossless_class_queues_in_a_tbf_that_pauses_to_a_crawl() -> None:
    port = next(p for p in Topology(_fabric()).ports() if p.name == "s1->l1")
    lines = tc.port_tc_lines(port)
    assert "qdisc add dev s1-l1 parent 1:11 handle 11: tbf rate 10000000000bit burst 9014 limit 307200" in lines
    assert any(line.startswith("qdisc add dev s1-l1 parent 1:12 handle 12: bfifo") for line in lines)
    assert tc.pause_leaf(port.link, paused=True)[:3] == ["tbf", "rate", f"{tc.PFC_PAUSE_RATE_BPS}bit"]


def test_the_tbf_change_message_carries_rate_burst_and_limit() -> None:
    msg = tbf_change(
        7, ifindex=4, parent=0x10011, handle=0x110000, rate_bps=5_000_000_000 * 8, burst=9014, limit=300_000
    )
    length, kind, flags, seq, _ = struct.unpack_from("<IHHII", msg)
    assert (length, kind, seq) == (len(msg), RTM_NEWQDISC, 7) and flags & 0x4  # NLM_F_ACK
    _, ifindex, handle, parent, _ = struct.unpack_from("<BxxxiIII", msg, 16)
    assert (ifindex, handle, parent) == (4, 0x110000, 0x10011)
    assert b"tbf\0" in msg
    assert struct.pack("<HHI", 8, 6, 9014) in msg  # TCA_TBF_BURST
    assert struct.pack("<HHQ", 12, 4, 5_000_000_000) in msg  # TCA_TBF_RATE64: over 32 bits of bytes/s
    ack = struct.pack("<IHHII", 36, 2, 0, 7, 0) + struct.pack("<i", -22) + bytes(16)
    assert ack_error(ack, 7) == 22 and ack_error(ack, 8) is None


def test_a_port_stays_paused_while_any_queue_holds_it() -> None:
    book = PauseBook(2)
    assert book.hold(0, queue=5) and not book.hold(0, queue=6)  # the second queue finds it paused
    book.paused(0, 10.0, {"port": "s1->l1"})
    assert book.release(5) == [] and book.release(6) == [0]
    book.resumed(0, 10.25)
    assert book.hold(1, queue=5)
    book.paused(1, 11.0, {"port": "l1h2->l1"})
    rows = book.end(12.0)
    assert [(r["port"], r["t_start"], r["t_end"], r["duration_s"]) for r in rows] == [
        ("s1->l1", 10.0, 10.25, 0.25),
        ("l1h2->l1", 11.0, 12.0, 1.0),
    ]


def test_paused_time_is_the_overlap_of_each_interval_with_the_pauses() -> None:
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    got = paused_time(t, np.array([[0.5, 1.5], [3.0, 3.25]]))
    assert got.tolist() == [0.5, 0.5, 0.0, 0.25]
    assert paused_time(t, np.empty((0, 2))).tolist() == [0.0] * 4


def test_a_paused_port_is_not_short_of_rate() -> None:
    # 1 s at 50 Mbit/s with a full queue throughout; the port sent only during the first half, then was paused
    t = np.arange(0.0, 1.0001, 0.004)
    sent = np.minimum(t, 0.5) * 50e6 / 8
    queues = [
        {"t": ti, "node": "s1", "dev": "s1-l1", "backlog_pkts": 5, "backlog_bytes": 45070, "tx_bytes": b}
        for ti, b in zip(t, sent, strict=True)
    ]
    ports = [{"node": "s1", "dev": "s1-l1", "rate_bps": 50e6}]
    assert check_bottlenecks(queues, ports)["ok"] is False
    pauses = pause_intervals([{"node": "s1", "dev": "s1-l1", "t_start": 0.5, "t_end": 1.0}])
    assert check_bottlenecks(queues, ports, pauses=pauses)["ok"] is True


def test_the_pfc_check_holds_the_reaction_to_the_headroom_bound() -> None:
    bound = REACTION_BOUND_S * 1e6
    ok = {"reaction_us": {"n": 10, "p50": 80.0, "p99": 400.0, "max": 900.0}, "lost_events": 0, "errors": []}
    assert check_pfc(ok)["ok"] is True
    slow = {**ok, "reaction_us": {"n": 10, "p50": 80.0, "p99": bound + 1, "max": bound + 5}}
    assert check_pfc(slow)["ok"] is False and "sized for" in check_pfc(slow)["reason"]
    assert check_pfc({**ok, "lost_events": 3})["ok"] is False
    assert check_pfc({"reaction_us": {"n": 0}})["ok"] is None


def test_a_lossless_class_marks_only_with_the_ebpf_marker() -> None:
    from testbed.ecn import EcnError, class_impl
    from testbed.spec.link import Marking

    step = Marking.from_dict({"mode": "step", "k": "30KB"}, "ecn")
    both = Capabilities.from_dict({"ecn": {"sch_red": True, "bpf_marker": True}})
    assert class_impl(step, both, lossless=False) == "kernel"  # RED as the class's leaf, where the kernel has it
    assert class_impl(step, both, lossless=True) == "bpf"  # a tbf leaf: the marker reads the class's own queue
    with pytest.raises(EcnError, match="kernel RED cannot mark it"):
        class_impl(Marking.from_dict({"mode": "step", "k": "30KB", "impl": "kernel"}, "ecn"), both, lossless=True)
    red_only = Capabilities.from_dict({"ecn": {"sch_red": True, "bpf_marker": False, "bpf_marker_reason": "no BTF"}})
    with pytest.raises(EcnError, match="no BTF"):
        class_impl(step, red_only, lossless=True)
