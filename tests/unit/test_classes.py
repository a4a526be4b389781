"""Traffic classes (testbed.spec.classes): the spec's checks, HTB's plan, and the tc lines of a port with classes."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.fabric import tc
from testbed.fabric.checks import check_spec
from testbed.fabric.classstats import class_rows
from testbed.host.capabilities import Capabilities, CapabilityError
from testbed.spec.classes import htb_plan
from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.topology import Topology
from testbed.spec.workload import parse_job
from tests.unit.test_doctor_ownership import PROBED

CLASSES = [
    {"name": "ctrl", "dscp": [46, 48], "priority": 1, "buffer": "50KB"},
    {"name": "bulk", "dscp": 0, "weight": 3},
    {"name": "storage", "dscp": [10], "weight": 1},
]


def _fabric(classes: Any = CLASSES, **link: Any) -> FabricSpec:
    host_link = {"rate": "100Mbit", "buffer": "300KB", "classes": classes, **link}
    return FabricSpec.from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link": host_link})


def _error(classes: Any, **link: Any) -> str:
    with pytest.raises(SpecError) as err:
        _fabric(classes, **link)
    return str(err.value)


def test_classes_parse_with_the_links_buffer_and_marking_as_defaults() -> None:
    link = _fabric().host_link
    ctrl, bulk, storage = link.classes
    assert ctrl.strict and ctrl.dscp == (46, 48) and link.class_buffer(ctrl).value == 51_200
    assert link.class_buffer(bulk) == link.buffer and link.class_marking(bulk) == link.marking
    assert (bulk.weight, storage.weight) == (3, 1)


@pytest.mark.parametrize(
    ("classes", "where", "why"),
    [
        ([{"name": "a", "dscp": 0}], "classes[0]", "exactly one of priority"),
        ([{"name": "a", "dscp": 0, "priority": 1, "weight": 2}], "classes[0]", "exactly one of priority"),
        ([{"name": "a", "dscp": 64, "weight": 1}], "classes[0].dscp", "64"),
        (
            [{"name": "a", "dscp": 0, "weight": 1}, {"name": "b", "dscp": [5, 0], "weight": 1}],
            "classes[1].dscp",
            "DSCP 0",
        ),
        (
            [{"name": "a", "dscp": 0, "weight": 1}, {"name": "a", "dscp": 1, "weight": 1}],
            "classes[1].name",
            "duplicate",
        ),
        ([{"name": "a", "dscp": 1, "weight": 1}], "classes", "unmarked packets"),
        ([{"name": "a", "dscp": 0, "priority": 2}, {"name": "b", "dscp": 1, "priority": 2}], "classes[0].priority", ""),
        ([{"name": f"c{i}", "dscp": i, "weight": 1} for i in range(9)], "classes", "at most 8"),
        ([{"name": "a", "dscp": 0, "weight": 1}, {"name": "b", "dscp": 1, "weight": 23}], "classes[1].weight", "22:1"),
        ([{"name": "a", "dscp": 0, "weight": 1, "buffer": "1KB"}], "classes[0].buffer", "one frame"),
        ([{"name": "a", "dscp": 0, "weight": 1, "colour": 1}], "classes[0].colour", "unknown key"),
        ([], "classes", "empty"),
    ],
)
def test_a_bad_class_is_one_line_naming_its_key(classes: Any, where: str, why: str) -> None:
    msg = _error(classes)
    assert msg.startswith(f"fabric.host_link.{where}:"), msg
    assert why in msg and "\n" not in msg


def test_a_class_threshold_above_its_own_buffer_is_refused() -> None:
    classes = [{"name": "a", "dscp": 0, "weight": 1, "buffer": "50KB", "ecn": {"mode": "step", "k": "60KB"}}]
    assert "classes[0].ecn.k: threshold 61440 bytes is above the buffer (51200 bytes)" in _error(classes)


def test_htb_plan_strict_levels_first_and_quanta_in_the_weights_ratio() -> None:
    plan = htb_plan(_fabric().host_link.classes, 9014)
    assert [(h.minor, h.prio, h.quantum) for h in plan] == [(0x11, 0, 9014), (0x12, 7, 27042), (0x13, 7, 9014)]


def test_port_lines_hold_a_class_a_leaf_and_a_filter_per_dscp() -> None:
    port = Topology(_fabric()).ports()[0]
    lines = tc.port_tc_lines(port)
    assert lines[0].endswith("htb default 12")  # the class with DSCP 0
    assert sum(" u32 match ip dsfield " in ln for ln in lines) == 4
    assert f"filter add dev {port.dev} parent 1: protocol ip prio 1 u32 match ip dsfield 0xb8 0xfc flowid 1:11" in lines
    assert f"qdisc add dev {port.dev} parent 1:11 handle 11: bfifo limit 51200" in lines
    assert any("classid 1:12 htb rate 1000bit ceil 100000000bit" in ln and "prio 7 quantum 27042" in ln for ln in lines)
    assert not any("handle 10:" in ln for ln in lines)


def test_a_port_without_classes_keeps_its_one_leaf() -> None:
    spec = FabricSpec.from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1})
    lines = tc.port_tc_lines(Topology(spec).ports()[0])
    assert lines[0].endswith("htb default 1") and lines[-1].split(" handle ")[1].startswith("10:")


def test_per_class_ecn_uses_the_ebpf_marker_without_kernel_red() -> None:
    ecn = {"sch_red": False, "bpf_marker": False, "bpf_marker_reason": "no BTF"}
    caps = Capabilities.from_dict({**PROBED, "qdisc.bfifo": True, "cc.cubic": True, "ecn": ecn})
    marked = [{"name": "a", "dscp": 0, "weight": 1, "ecn": {"mode": "step", "k": "30KB"}}]
    with pytest.raises(CapabilityError, match=r"port l1->l1h1 class a: per-class ECN marking: no ECN marking .*no BTF"):
        check_spec(_fabric(marked), caps)
    check_spec(_fabric(), caps)  # classes without ECN build anywhere
    caps = Capabilities.from_dict({**PROBED, "qdisc.bfifo": True, "cc.cubic": True, "ecn": {**ecn, "bpf_marker": True}})
    check_spec(_fabric(marked), caps)  # the marker reads the class's own queue
    kernel = [{**marked[0], "ecn": {"mode": "step", "k": "30KB", "impl": "kernel"}}]
    with pytest.raises(CapabilityError, match="needs sch_red"):
        check_spec(_fabric(kernel), caps)


def test_class_rows_read_each_leaf() -> None:
    port = Topology(_fabric()).ports()[0]
    qdiscs = [
        {"kind": "htb", "handle": "1:", "bytes": 9, "packets": 9, "drops": 0, "backlog": 0},
        {"kind": "bfifo", "handle": "11:", "parent": "1:11", "bytes": 294, "packets": 3, "drops": 0, "backlog": 0},
        {"kind": "bfifo", "handle": "12:", "parent": "1:12", "bytes": 852, "packets": 10, "drops": 2, "backlog": 98},
        {"kind": "bfifo", "handle": "13:", "parent": "1:13", "bytes": 0, "packets": 0, "drops": 0, "backlog": 0},
    ]
    rows = class_rows(port, qdiscs)
    assert [(r["class"], r["dscp"], r["tx_pkts"], r["drops"]) for r in rows] == [
        ("ctrl", "46 48", 3, 0),
        ("bulk", "0", 10, 2),
        ("storage", "10", 0, 0),
    ]
    assert rows[1]["backlog_bytes"] == 98 and rows[0]["priority"] == 1 and rows[1]["weight"] == 3


def test_a_job_sets_its_dscp() -> None:
    job = parse_job({"kind": "iperf", "name": "a", "src": "l1h1", "dst": "l2h1", "dscp": 46}, "workload[0]")
    assert job.dscp == 46
    with pytest.raises(SpecError, match=r"workload\[0\]\.dscp"):
        parse_job({"kind": "iperf", "name": "a", "src": "l1h1", "dst": "l2h1", "dscp": 64}, "workload[0]")
