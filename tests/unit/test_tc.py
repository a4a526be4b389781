"""tc and nftables command building (no root): the lines fabric.py feeds to `tc -batch` and `nft -f`."""

from __future__ import annotations

from testbed.fabric.tc import delay_tc_lines, droptail_leaf, htb_burst, loss_nft_rules, port_tc_lines
from testbed.spec.fabric import FabricSpec
from testbed.spec.link import LinkSpec
from testbed.spec.topology import Port, Topology


def ports(**kw: object) -> dict[str, Port]:
    t = Topology(FabricSpec.from_dict({"spines": 2, "leaves": 2, "hosts_per_leaf": 2, **kw}))
    return {p.name: p for p in t.ports()}


def test_bytes_buffer_lines() -> None:
    p = ports(host_link={"rate": "100Mbit", "buffer": "300KB", "mtu": 9000})["l1->l1h2"]
    assert port_tc_lines(p) == [
        "qdisc replace dev l1-l1h2 root handle 1: htb default 1",
        "class add dev l1-l1h2 parent 1: classid 1:1 htb rate 100000000bit ceil 100000000bit "
        "burst 18028 cburst 18028 quantum 9014",
        "qdisc add dev l1-l1h2 parent 1:1 handle 10: bfifo limit 307200",
    ]


def test_packets_buffer_lines_mtu1500() -> None:
    p = ports(host_link={"rate": "10Mbit", "buffer": "20pkt", "mtu": 1500}, fabric_link={"rate": "50Mbit"})
    host = port_tc_lines(p["l2h1->l2"])
    assert host[1] == (
        "class add dev l2h1-l2 parent 1: classid 1:1 htb rate 10000000bit ceil 10000000bit "
        "burst 3028 cburst 3028 quantum 1514"
    )
    assert host[2] == "qdisc add dev l2h1-l2 parent 1:1 handle 10: pfifo limit 20"
    up = port_tc_lines(p["l2->s1"])
    assert "htb rate 50000000bit ceil 50000000bit" in up[1]
    assert up[2].endswith("pfifo limit 20")  # fabric_link inherits the host_link buffer
    assert up[0] == "qdisc replace dev l2-s1 root handle 1: htb default 1"


def test_burst_and_leaf_builders() -> None:
    assert htb_burst(LinkSpec(mtu=9000)) == 18028
    assert htb_burst(LinkSpec(mtu=1500)) == 3028
    assert droptail_leaf(LinkSpec.from_dict({"buffer": "64KiB"}, "x")) == ["bfifo", "limit", "65536"]
    assert droptail_leaf(LinkSpec.from_dict({"buffer": "7pkt"}, "x")) == ["pfifo", "limit", "7"]
    p = ports()["s1->l1"]
    lines = port_tc_lines(p, leaf=lambda link: ["red", "limit", str(link.buffer_bytes), "ecn"])
    assert lines[2] == "qdisc add dev s1-l1 parent 1:1 handle 10: red limit 300000 ecn"


def test_override_reaches_tc() -> None:
    p = ports(overrides=[{"port": "s2->l1", "rate": "20Mbit", "buffer": "50KB"}])
    lines = port_tc_lines(p["s2->l1"])
    assert "rate 20000000bit ceil 20000000bit" in lines[1]
    assert lines[2].endswith("bfifo limit 51200")
    assert port_tc_lines(p["l1->s2"])[2].endswith("bfifo limit 300000")


def test_delay_lines() -> None:
    p = ports(fabric_link={"delay": "2.5ms"})["s1->l2"]
    assert delay_tc_lines(p, "ifb0") == [
        "qdisc add dev l2-s1 handle ffff: ingress",
        "filter add dev l2-s1 parent ffff: protocol all prio 1 u32 match u32 0 0 "
        "action mirred egress redirect dev ifb0",
        "qdisc replace dev ifb0 root netem delay 2500us limit 100000",
    ]


def test_loss_rules() -> None:
    p = ports(host_link={"loss": 0.01}, fabric_link={"loss": 0.0}, overrides=[{"port": "l1->s1", "loss": 0.0001}])
    l1 = [q for q in p.values() if q.node == "l1"]
    script = loss_nft_rules("tbab12", l1)
    lines = script.splitlines()
    assert lines[:3] == [
        "table inet tbab12 {",
        "  chain postrouting {",
        "    type filter hook postrouting priority 0; policy accept;",
    ]
    assert '    oifname "l1-l1h1" numgen random mod 1000000 < 10000 counter drop' in lines
    assert '    oifname "l1-l1h2" numgen random mod 1000000 < 10000 counter drop' in lines
    assert '    oifname "l1-s1" numgen random mod 1000000 < 100 counter drop' in lines
    assert not any('"l1-s2"' in line for line in lines)  # no loss, no rule
    assert lines[-2:] == ["  }", "}"] and script.endswith("\n")
    assert script.count("{") == script.count("}")
    # a namespace with no lossy port still gets a valid (empty) table
    empty = loss_nft_rules("tbab12", [q for q in p.values() if q.node == "s2"])
    assert "numgen" not in empty and empty.count("{") == empty.count("}")
