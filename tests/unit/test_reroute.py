"""Routes around failed links (testbed.spec.reroute): what each router needs once a failure is detected."""

from __future__ import annotations

import pytest

from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.reroute import Override, find_link, overrides, rack_prefixes
from testbed.spec.topology import Topology


def _sl(spines: int = 2, leaves: int = 3) -> Topology:
    return Topology(FabricSpec.from_dict({"spines": spines, "leaves": leaves, "hosts_per_leaf": 1}))


def _ft() -> Topology:
    return Topology(FabricSpec.from_dict({"topology": "fat-tree", "k": 4}))


def test_nothing_failed_needs_nothing() -> None:
    assert overrides(_sl(), []) == [] and overrides(_ft(), []) == []
    assert rack_prefixes(_sl()) == {"l1": "10.1.0.0/16", "l2": "10.2.0.0/16", "l3": "10.3.0.0/16"}
    assert rack_prefixes(_ft())["p2e1"] == "10.2.1.0/24"


def test_a_spine_downlink_is_withdrawn_at_the_other_leaves() -> None:
    """s1-l2 down: l2 and s1 lost their own routes through it (the kernel did that); l1 and l3 stop sending l2's
    prefix to s1. Nobody else changes."""
    t = _sl()
    link = find_link(t, "l2-s1", "x")
    got = overrides(t, [link])
    s2 = {n: next(p for p in t.ports_of(n) if p.peer == "s2") for n in ("l1", "l3")}
    assert got == [
        Override("l1", "10.2.0.0/16", ((s2["l1"].peer_addr, "l1-s2"),)),
        Override("l3", "10.2.0.0/16", ((s2["l3"].peer_addr, "l3-s2"),)),
    ]
    assert got[0].command() == f"route replace 10.2.0.0/16 via {s2['l1'].peer_addr} dev l1-s2"


def test_a_leaf_cut_off_is_unreachable() -> None:
    t = _sl(spines=1, leaves=2)
    got = overrides(t, [find_link(t, "s1-l2", "x")])
    assert got == [Override("l1", "10.2.0.0/16", ())]  # s1 lost its route to l2 with the link
    assert got[0].command() == "route replace unreachable 10.2.0.0/16"


def test_fat_tree_core_link() -> None:
    """c1-p1a1 down: the aggregation switches of the other pods that reach pod 1 through c1 use their other core;
    the edges keep their aggregate routes (each agg still reaches pod 1)."""
    t = _ft()
    link = find_link(t, "c1-p1a1", "x")
    got = overrides(t, [link])
    assert {o.node for o in got} == {"p2a1", "p3a1", "p4a1"}
    assert {o.dst for o in got} == {"10.1.1.0/24", "10.1.2.0/24"}
    assert all(len(o.nexthops) == 1 and o.nexthops[0][1].endswith("-c2") for o in got)


def test_two_failures_and_recovery_of_one() -> None:
    t = _sl(spines=2, leaves=3)
    a, b = find_link(t, "s1-l2", "x"), find_link(t, "s2-l3", "x")
    both = overrides(t, [a, b])
    assert {(o.node, o.dst) for o in both} == {
        ("l1", "10.2.0.0/16"),
        ("l3", "10.2.0.0/16"),
        ("l1", "10.3.0.0/16"),
        ("l2", "10.3.0.0/16"),
    }
    assert {(o.node, o.dst) for o in overrides(t, [b])} == {("l1", "10.3.0.0/16"), ("l2", "10.3.0.0/16")}


def test_unknown_link_is_one_line() -> None:
    with pytest.raises(SpecError, match=r"events\[0\].link: no link 'l1-l2' in this fabric"):
        find_link(_sl(), "l1-l2", "events[0].link")
