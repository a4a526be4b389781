"""Names and addresses derived from position (no root): spine-leaf and k-ary fat-tree."""

from __future__ import annotations

import ipaddress
from collections import Counter

import pytest

from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.topology import Topology


def spine_leaf(**kw: object) -> Topology:
    return Topology(FabricSpec.from_dict({"spines": 2, "leaves": 4, "hosts_per_leaf": 2, **kw}))


def fat_tree(k: int = 4) -> Topology:
    return Topology(FabricSpec.from_dict({"topology": "fat-tree", "k": k}))


def test_spine_leaf_counts() -> None:
    t = spine_leaf()
    layers = Counter(n.layer for n in t.nodes.values())
    assert layers == {"spine": 2, "leaf": 4, "host": 8}
    assert len(t.links) == 8 + 2 * 4
    assert len(t.ports()) == 2 * len(t.links)
    assert len(t.hosts) == 8
    assert [n.name for n in t.routers()] == ["s1", "s2", "l1", "l2", "l3", "l4"]
    assert list(t.hosts) == [f"l{j}h{k}" for j in range(1, 5) for k in (1, 2)]


def test_leaf2_host3_name_and_address() -> None:
    t = spine_leaf(hosts_per_leaf=3, leaves=3)
    h = t.hosts["l2h3"]
    assert (h.ip, h.leaf, h.pod) == ("10.2.3.2", "l2", 2)
    assert t.nodes["l2h3"].layer == "host" and t.nodes["l2h3"].pos == (2, 3)
    (port,) = t.ports_of("l2h3")
    assert (port.dev, port.peer, port.peer_dev, port.addr, port.peer_addr, port.prefixlen) == (
        "l2h3-l2",
        "l2",
        "l2-l2h3",
        "10.2.3.2",
        "10.2.3.1",
        24,
    )
    assert t.owner_of("10.2.3.1") == "l2" and t.owner_of("10.2.3.2") == "l2h3"
    with pytest.raises(KeyError):
        t.owner_of("10.9.9.9")
    # the same position gives the same name and address in any fabric size that contains it
    big = spine_leaf(spines=4, leaves=8, hosts_per_leaf=6)
    assert big.hosts["l2h3"].ip == "10.2.3.2"


def test_spine_leaf_fabric_subnets() -> None:
    t = spine_leaf()
    fabric = [lk for lk in t.links if lk.a.startswith("s")]
    assert len(fabric) == 8
    nets = [ipaddress.IPv4Interface(f"{lk.a_addr}/{lk.prefixlen}").network for lk in fabric]
    assert all(n.prefixlen == 30 for n in nets)
    assert len(set(nets)) == len(nets)  # distinct /30s
    assert all(n.subnet_of(ipaddress.IPv4Network("172.16.0.0/12")) for n in nets)
    by_pair = {(lk.a, lk.b): lk for lk in fabric}
    # link (spine i, leaf j) is number (i-1)*leaves + (j-1); spine side .1, leaf side .2
    assert (by_pair["s1", "l1"].a_addr, by_pair["s1", "l1"].b_addr) == ("172.16.0.1", "172.16.0.2")
    assert (by_pair["s1", "l2"].a_addr, by_pair["s1", "l2"].b_addr) == ("172.16.0.5", "172.16.0.6")
    assert (by_pair["s2", "l1"].a_addr, by_pair["s2", "l1"].b_addr) == ("172.16.0.17", "172.16.0.18")
    # every address of the fabric is unique
    addrs = [a for lk in t.links for a in (lk.a_addr, lk.b_addr)]
    assert len(addrs) == len(set(addrs))


def test_spine_leaf_directions() -> None:
    t = spine_leaf()
    d = {p.name: p.direction for p in t.ports()}
    assert d["l1h1->l1"] == "up" and d["l1->l1h1"] == "down"
    assert d["l1->s1"] == "up" and d["s1->l1"] == "down"
    assert d["l4->s2"] == "up" and d["s2->l4"] == "down"
    for p in t.ports():
        assert p.dev == f"{p.node}-{p.peer}" and p.peer_dev == f"{p.peer}-{p.node}"
    assert Counter(p.direction for p in t.ports()) == {"up": 16, "down": 16}


def test_spine_leaf_link_specs() -> None:
    t = spine_leaf(host_link={"rate": "10Mbit"}, fabric_link={"rate": "20Mbit"})
    for p in t.ports():
        want = 10_000_000 if "host" in (p.layer, p.peer_layer) else 20_000_000
        assert p.link.rate_bps == want, p.name


def test_fat_tree_k4_counts_names_addresses() -> None:
    t = fat_tree(4)
    layers = Counter(n.layer for n in t.nodes.values())
    assert layers == {"core": 4, "agg": 8, "edge": 8, "host": 16}
    assert len(t.links) == 16 + 16 + 16  # host-edge, edge-agg, agg-core
    assert len(t.ports()) == 96
    h = t.hosts["p2e1h2"]
    assert (h.ip, h.leaf, h.pod) == ("10.2.1.10", "p2e1", 2)
    (port,) = t.ports_of("p2e1h2")
    assert (port.peer_addr, port.prefixlen) == ("10.2.1.9", 30)
    assert t.hosts["p1e1h1"].ip == "10.1.1.6"
    assert t.hosts["p4e2h2"].ip == "10.4.2.10"
    # core c connects to aggregation switch (c-1)//(k/2)+1 of every pod
    core_peers = {c: sorted(p.peer for p in t.ports_of(c)) for c in ("c1", "c2", "c3", "c4")}
    assert core_peers["c1"] == core_peers["c2"] == ["p1a1", "p2a1", "p3a1", "p4a1"]
    assert core_peers["c3"] == core_peers["c4"] == ["p1a2", "p2a2", "p3a2", "p4a2"]
    # each aggregation switch: k/2 edges down, k/2 cores up
    agg = {p.peer: p.direction for p in t.ports_of("p3a2")}
    assert agg == {"p3e1": "down", "p3e2": "down", "c3": "up", "c4": "up"}
    edge = {p.peer: p.direction for p in t.ports_of("p3e2")}
    assert edge == {"p3e2h1": "down", "p3e2h2": "down", "p3a1": "up", "p3a2": "up"}
    fab = [lk for lk in t.links if t.nodes[lk.b].layer != "host"]
    nets = {ipaddress.IPv4Interface(f"{lk.a_addr}/30").network for lk in fab}
    assert len(nets) == 32
    addrs = [a for lk in t.links for a in (lk.a_addr, lk.b_addr)]
    assert len(addrs) == len(set(addrs))


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree_sizes(k: int) -> None:
    t = fat_tree(k)
    half = k // 2
    assert len(t.hosts) == k**3 // 4
    assert sum(n.layer == "core" for n in t.nodes.values()) == half * half
    assert len(t.links) == 3 * k**3 // 4
    assert t.spec.oversubscription == 1


def test_largest_accepted_topologies_fit_interface_names() -> None:
    # each dimension at its largest within the 1,000-node ceiling: 64 spines x 254 leaves (x 2 hosts), 254 hosts on
    # each of 3 leaves, and the fat-tree of k = 12
    wide = spine_leaf(spines=64, leaves=254, hosts_per_leaf=2)
    deep = spine_leaf(spines=1, leaves=3, hosts_per_leaf=254)
    for t in (wide, deep, fat_tree(12)):
        names = [p.dev for p in t.ports()]
        longest = max(names, key=len)
        assert len(longest) <= 15, longest
        assert len(names) == len(set(names))
        # every host address unique and inside 10.0.0.0/8
        ips = [h.ip for h in t.hosts.values()]
        assert len(ips) == len(set(ips))
        assert all(ip.startswith("10.") for ip in ips)
    assert wide.hosts["l254h2"].ip == "10.254.2.2" and deep.hosts["l3h254"].ip == "10.3.254.2"
    assert len(wide.links) == 254 * 2 + 64 * 254
    devs = {d for t in (wide, deep) for lk in t.links for d in (lk.a_dev, lk.b_dev)}
    assert {"l254-s64", "s64-l254", "l3-l3h254", "l3h254-l3"} <= devs


def test_fabric_above_the_node_ceiling_is_refused() -> None:
    with pytest.raises(SpecError, match=r"64 x 254 x 254 is 64834 nodes"):
        spine_leaf(spines=64, leaves=254, hosts_per_leaf=254)
    with pytest.raises(SpecError, match=r"k = 16 is 1344 nodes"):
        fat_tree(16)


def test_describe() -> None:
    t = spine_leaf(
        host_link={"rate": "10Mbit", "buffer": "20pkt", "mtu": 1500, "loss": 0.01},
        oversubscription="2:1",
        overrides=[{"port": "l1->l1h1", "ecn": {"mode": "step", "k": "10pkt"}}],
    )
    d = t.describe()
    assert d["topology"] == "spine-leaf"
    assert d["oversubscription"] == 2.0
    nodes = {n["name"]: n for n in d["nodes"]}  # type: ignore[attr-defined]
    assert nodes["l1h2"] == {"name": "l1h2", "layer": "host", "ip": "10.1.2.2"}
    assert nodes["s2"] == {"name": "s2", "layer": "spine"}
    ports = {(p["node"], p["peer"]): p for p in d["ports"]}  # type: ignore[attr-defined]
    assert len(ports) == 32
    p = ports["l1", "l1h1"]
    assert p == {
        "node": "l1",
        "dev": "l1-l1h1",
        "peer": "l1h1",
        "layer": "leaf",
        "peer_layer": "host",
        "direction": "down",
        "addr": "10.1.1.1",
        "rate_bps": 10_000_000,
        "buffer_bytes": 20 * 1514,
        "mtu": 1500,
        "loss": 0.01,
        "delay_s": 0.0,
        "marking": "ECN K=10pkt",
    }
    up = ports["l1", "s1"]
    assert (up["rate_bps"], up["direction"], up["marking"]) == (5_000_000, "up", "drop-tail")
    assert fat_tree(4).describe()["topology"] == "fat-tree"
