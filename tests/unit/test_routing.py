"""Computed static routes, ECMP sysctls and hop-by-hop path prediction against a fake kernel (no root)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import zlib
from typing import Any

import pytest

from testbed.fabric import routing
from testbed.fabric.routing import predict_path, route_commands, router_sysctls
from testbed.spec.fabric import FabricSpec
from testbed.spec.link import EcmpSpec
from testbed.spec.topology import Route, Topology


def spine_leaf(**kw: object) -> Topology:
    return Topology(FabricSpec.from_dict({"spines": 2, "leaves": 4, "hosts_per_leaf": 2, **kw}))


def fat_tree() -> Topology:
    return Topology(FabricSpec.from_dict({"topology": "fat-tree", "k": 4}))


def test_host_default_via_its_leaf() -> None:
    t = spine_leaf()
    assert t.routes["l2h1"] == [Route("default", (("10.2.1.1", "l2h1-l2"),))]
    assert t.routes["l4h2"] == [Route("default", (("10.4.2.1", "l4h2-l4"),))]


def test_leaf_ecmp_over_every_spine() -> None:
    t = spine_leaf(spines=3)
    (r,) = t.routes["l2"]
    assert r.dst == "10.0.0.0/8"
    # one next hop per spine, each the spine's side of that leaf's /30
    assert r.nexthops == (("172.16.0.5", "l2-s1"), ("172.16.0.21", "l2-s2"), ("172.16.0.37", "l2-s3"))
    for gw, dev in r.nexthops:
        spine = dev.split("-")[1]
        assert t.owner_of(gw) == spine


def test_spines_one_slash16_per_leaf() -> None:
    t = spine_leaf()
    routes = t.routes["s2"]
    assert [r.dst for r in routes] == ["10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16", "10.4.0.0/16"]
    assert all(len(r.nexthops) == 1 for r in routes)
    assert routes[2].nexthops == (("172.16.0.26", "s2-l3"),)
    assert t.owner_of("172.16.0.26") == "l3"


def test_fat_tree_routes() -> None:
    t = fat_tree()
    assert t.routes["p1e1h1"] == [Route("default", (("10.1.1.5", "p1e1h1-p1e1"),))]
    (edge,) = t.routes["p2e1"]
    assert edge.dst == "10.0.0.0/8"
    assert [dev for _, dev in edge.nexthops] == ["p2e1-p2a1", "p2e1-p2a2"]
    agg = t.routes["p2a2"]
    assert [r.dst for r in agg] == ["10.2.1.0/24", "10.2.2.0/24", "10.0.0.0/8"]
    assert [dev for _, dev in agg[-1].nexthops] == ["p2a2-c3", "p2a2-c4"]
    assert agg[0].nexthops[0][1] == "p2a2-p2e1"
    core = t.routes["c3"]
    assert [r.dst for r in core] == [f"10.{p}.0.0/16" for p in (1, 2, 3, 4)]
    assert [r.nexthops[0][1] for r in core] == ["c3-p1a2", "c3-p2a2", "c3-p3a2", "c3-p4a2"]
    for r in core:
        assert t.owner_of(r.nexthops[0][0]) == r.nexthops[0][1].split("-")[1]


def test_route_commands() -> None:
    t = spine_leaf()
    assert route_commands(t.routes["l1h1"]) == ["route replace default via 10.1.1.1 dev l1h1-l1"]
    assert route_commands(t.routes["l1"]) == [
        "route replace 10.0.0.0/8 nexthop via 172.16.0.1 dev l1-s1 weight 1 nexthop via 172.16.0.17 dev l1-s2 weight 1"
    ]
    assert route_commands(t.routes["s1"])[0] == "route replace 10.1.0.0/16 via 172.16.0.2 dev s1-l1"
    assert route_commands([]) == []


def test_router_sysctls() -> None:
    l4 = router_sysctls(EcmpSpec("l4"), has_seed_sysctl=False)
    assert l4["net.ipv4.fib_multipath_hash_policy"] == "3"
    assert l4["net.ipv4.fib_multipath_hash_fields"] == "0x0037"
    assert l4["net.ipv4.ip_forward"] == "1"
    assert l4["net.ipv4.conf.all.rp_filter"] == "0"
    assert "net.ipv4.fib_multipath_hash_seed" not in l4
    l3 = router_sysctls(EcmpSpec("l3"), has_seed_sysctl=True)
    assert l3["net.ipv4.fib_multipath_hash_fields"] == "0x0003"
    assert "net.ipv4.fib_multipath_hash_seed" not in l3
    seeded = router_sysctls(EcmpSpec("l4", seed=7), has_seed_sysctl=True)
    assert seeded["net.ipv4.fib_multipath_hash_seed"] == "7"
    assert router_sysctls(EcmpSpec("l4", seed=0), has_seed_sysctl=True)["net.ipv4.fib_multipath_hash_seed"] == "0"
    with pytest.raises(RuntimeError, match="fib_multipath_hash_seed"):
        router_sysctls(EcmpSpec("l4", seed=7), has_seed_sysctl=False)


# ---------------------------------------------------------------------------------------------------------------
# Path prediction against a fake kernel: each node answers `ip route get` from the computed routes, choosing among
# an ECMP group's next hops by a deterministic function of the hashed fields (like policy 3 with hash fields).


class FakeKernel:
    def __init__(self, topo: Topology, prefix: str = "tbfake"):
        self.topo = topo
        self.prefix = prefix
        self.calls: list[tuple[str, str, str, str | None, str, int, int]] = []
        self.fields = topo.spec.ecmp.hash_fields

    def netns_of(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def pick(self, n: int, src: str, dst: str, proto: str, sport: int, dport: int) -> int:
        key = f"{src}|{dst}"
        if self.fields & 0x30:
            key += f"|{proto}|{sport}|{dport}"
        return zlib.crc32(key.encode()) % n

    def route_get(
        self, netns: str, dst: str, src: str, iif: str | None, proto: str, sport: int, dport: int, mark: int = 0
    ) -> dict[str, str]:
        self.calls.append((netns, dst, src, iif, proto, sport, dport))
        node = netns.removeprefix(self.prefix + "-")
        addr = ipaddress.IPv4Address(dst)
        for p in self.topo.ports_of(node):  # connected subnets first
            if addr in ipaddress.IPv4Interface(f"{p.addr}/{p.prefixlen}").network:
                return {"dst": dst, "dev": p.dev, "prefsrc": p.addr}
        best: Route | None = None
        for r in self.topo.routes[node]:
            net = ipaddress.IPv4Network("0.0.0.0/0" if r.dst == "default" else r.dst)
            if addr in net and (best is None or net.prefixlen > _plen(best)):
                best = r
        assert best is not None, f"{node} has no route to {dst}"
        n = len(best.nexthops)  # a mark is a sprayed way: its table holds each ECMP route's k-th next hop
        gw, dev = best.nexthops[(mark - 1) % n if mark else self.pick(n, src, dst, proto, sport, dport)]
        return {"dst": dst, "gateway": gw, "dev": dev}


def _plen(r: Route) -> int:
    return 0 if r.dst == "default" else ipaddress.IPv4Network(r.dst).prefixlen


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(topo: Topology) -> FakeKernel:
        k = FakeKernel(topo)
        monkeypatch.setattr(routing, "_ip_route_get", k.route_get)
        return k

    return make


def test_predict_same_leaf(fake: Any) -> None:
    t = spine_leaf()
    k = fake(t)
    assert predict_path(t, k.netns_of, "l1h1", "l1h2", sport=1000, dport=5201) == ["l1h1", "l1", "l1h2"]
    assert k.calls == [("tbfake-l1", "10.1.2.2", "10.1.1.2", "l1-l1h1", "tcp", 1000, 5201)]


def test_predict_cross_leaf_walk(fake: Any) -> None:
    t = spine_leaf()
    k = fake(t)
    path = predict_path(t, k.netns_of, "l1h1", "l3h2", proto="udp", sport=40000, dport=5201)
    assert path[0] == "l1h1" and path[1] == "l1" and path[3:] == ["l3", "l3h2"]
    spine_index = k.pick(2, "10.1.1.2", "10.3.2.2", "udp", 40000, 5201)
    assert path[2] == f"s{spine_index + 1}"
    # hop-by-hop: each router asked in its own namespace, with the interface the packet came in on
    assert [(c[0], c[3]) for c in k.calls] == [
        ("tbfake-l1", "l1-l1h1"),
        (f"tbfake-{path[2]}", f"{path[2]}-l1"),
        ("tbfake-l3", f"l3-{path[2]}"),
    ]
    assert all(c[1:3] == ("10.3.2.2", "10.1.1.2") and c[4:] == ("udp", 40000, 5201) for c in k.calls)


def test_predict_l4_spreads_l3_does_not(fake: Any) -> None:
    t4 = spine_leaf(ecmp={"hash": "l4"})
    k4 = fake(t4)
    spines4 = {predict_path(t4, k4.netns_of, "l1h1", "l2h1", sport=s, dport=5201)[2] for s in range(40000, 40016)}
    assert spines4 == {"s1", "s2"}
    t3 = spine_leaf(ecmp={"hash": "l3"})
    k3 = fake(t3)
    spines3 = {predict_path(t3, k3.netns_of, "l1h1", "l2h1", sport=s, dport=5201)[2] for s in range(40000, 40016)}
    assert len(spines3) == 1


def test_predict_fat_tree(fake: Any) -> None:
    t = fat_tree()
    k = fake(t)
    path = predict_path(t, k.netns_of, "p1e1h1", "p4e2h2", sport=1234, dport=80)
    assert len(path) == 7  # host, edge, agg, core, agg, edge, host
    assert path[0:2] == ["p1e1h1", "p1e1"] and path[-2:] == ["p4e2", "p4e2h2"]
    assert [t.nodes[n].layer for n in path] == ["host", "edge", "agg", "core", "agg", "edge", "host"]
    assert path[2].startswith("p1a") and path[4].startswith("p4a")
    # the core is one the chosen aggregation switch connects to, and it comes down to the same agg index
    assert path[3] in {p.peer for p in t.ports_of(path[2])}
    assert path[2][-1] == path[4][-1]
    # inside a pod: edge, agg, edge
    intra = predict_path(t, k.netns_of, "p2e1h1", "p2e2h1", sport=1, dport=2)
    assert [t.nodes[n].layer for n in intra] == ["host", "edge", "agg", "edge", "host"]


def test_predict_loop_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    t = spine_leaf()
    calls: list[str] = []

    def bouncing(
        netns: str, dst: str, src: str, iif: str | None, proto: str, sport: int, dport: int, mark: int = 0
    ) -> dict[str, str]:
        calls.append(netns)
        node = netns.split("-", 1)[1]
        return {"dev": "l1-s1" if node == "l1" else "s1-l1"}  # l1 <-> s1 forever

    monkeypatch.setattr(routing, "_ip_route_get", bouncing)
    with pytest.raises(RuntimeError, match=r"no path from l1h1 to l2h1 within 14 hops \(routing loop\?\)"):
        predict_path(t, lambda n: f"tbx-{n}", "l1h1", "l2h1", sport=1, dport=2)
    assert len(calls) == len(t.nodes)  # bounded by the node count


def test_ip_route_get_argv_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    answers = [
        subprocess.CompletedProcess(
            [], 0, json.dumps([{"dst": "10.2.1.2", "gateway": "172.16.0.1", "dev": "l1-s1"}]), ""
        ),
        subprocess.CompletedProcess([], 2, "", "Error: inet prefix is expected\n"),
        subprocess.CompletedProcess([], 0, "[]", ""),
    ]

    def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        assert kw.get("timeout")
        return answers.pop(0)

    monkeypatch.setattr(routing.subprocess, "run", run)
    hop = routing._ip_route_get("tb1-l1", "10.2.1.2", "10.1.1.2", "l1-l1h1", "tcp", 1, 2)
    assert hop["dev"] == "l1-s1"
    assert seen[0] == [
        "ip", "-n", "tb1-l1", "-j", "route", "get", "10.2.1.2", "from", "10.1.1.2", "iif", "l1-l1h1",
        "ipproto", "tcp", "sport", "1", "dport", "2",
    ]  # fmt: skip
    with pytest.raises(RuntimeError, match="failed: Error: inet prefix is expected"):
        routing._ip_route_get("tb1-l1", "bad", "10.1.1.2", None, "tcp", 1, 2)
    assert "iif" not in seen[1]
    with pytest.raises(RuntimeError, match="gave no route"):
        routing._ip_route_get("tb1-l1", "10.2.1.2", "10.1.1.2", None, "udp", 1, 2)


def test_spray_ways_and_tables() -> None:
    """Each way's table is whole: the node's subnets, its single routes, and each ECMP route's k-th next hop, so
    a leaf's own hosts are never sent back up by an aggregate route (seen in the first spray run here)."""
    t = spine_leaf(ecmp={"mode": "spray"})
    leaf, spine = t.routes["l1"], t.routes["s1"]
    assert routing.spray_ways(leaf) == 2 and routing.spray_ways(spine) == 0
    assert routing.spray_commands(spine, t.ports_of("s1")) == []
    lines = routing.spray_commands(leaf, t.ports_of("l1"))
    assert [ln for ln in lines if ln.startswith("rule")] == [
        "rule add fwmark 1 lookup 101 pref 1001",
        "rule add fwmark 2 lookup 102 pref 1002",
    ]
    for k, table in ((1, 101), (2, 102)):
        mine = [ln for ln in lines if ln.endswith(f"table {table}") and ln.startswith("route")]
        for p in t.ports_of("l1"):  # every connected subnet
            net = ipaddress.ip_interface(f"{p.addr}/{p.prefixlen}").network
            assert f"route replace {net} dev {p.dev} scope link table {table}" in mine
        for r in leaf:
            gw, dev = r.nexthops[(k - 1) % len(r.nexthops)]
            assert f"route replace {r.dst} via {gw} dev {dev} table {table}" in mine
    assert (
        routing.spray_ways([Route("10.9.0.0/16", (("a", "x"), ("b", "y"))), Route("10.8.0.0/16", (("a", "x"),) * 3)])
        == 6
    )
    # only packets from ports that are no ECMP next hop get a way: the leaf's host ports, not its uplinks
    nft = routing.spray_nft(leaf, t.ports_of("l1"), "round-robin")
    assert 'iifname { "l1-l1h1", "l1-l1h2" } meta mark set numgen inc mod 2 offset 1' in nft
    assert "numgen random mod 2 offset 1" in routing.spray_nft(leaf, t.ports_of("l1"), "random")


def test_predict_sprayed_hop_names_every_next_hop(fake: Any) -> None:
    t = spine_leaf(ecmp={"mode": "spray"})
    k = fake(t)
    ways = {n: routing.spray_ways(r) for n, r in t.routes.items()}
    path = predict_path(t, k.netns_of, "l1h1", "l2h1", sport=1, dport=2, ways=lambda n: ways.get(n, 0))
    assert path == ["l1h1", "l1", "s1|s2", "l2", "l2h1"]
    assert predict_path(t, k.netns_of, "l1h1", "l1h2", ways=lambda n: ways.get(n, 0)) == ["l1h1", "l1", "l1h2"]


def test_flowlet_gap_is_the_most_two_paths_can_differ() -> None:
    """A full buffer on every router-to-router hop of the longest path, at the slowest-draining such port."""
    link = {"rate": "100Mbit", "buffer": "300KB"}
    t = spine_leaf(host_link=link, ecmp={"mode": "flowlet"})
    assert t.flowlet_gap() == pytest.approx(2 * 307_200 * 8 / 100e6)  # leaf->spine, spine->leaf
    slow = spine_leaf(host_link=link, oversubscription="2:1", ecmp={"mode": "flowlet"})
    inner = [p.link for p in slow.ports() if slow.nodes[p.node].is_router and slow.nodes[p.peer].is_router]
    assert slow.flowlet_gap() == pytest.approx(2 * max(lk.buffer_bytes * 8 / lk.rate_bps for lk in inner))
    ft = Topology(
        FabricSpec.from_dict({"topology": "fat-tree", "k": 4, "host_link": link, "ecmp": {"mode": "flowlet"}})
    )
    assert ft.flowlet_gap() == pytest.approx(4 * 307_200 * 8 / 100e6)  # edge->agg->core->agg->edge
    given = spine_leaf(ecmp={"mode": "flowlet", "gap": "500us", "pick": "random"})
    assert given.flowlet_gap() == pytest.approx(500e-6) and given.spec.ecmp.pick == "random"


def test_adaptive_mode_parses_with_a_per_packet_gap() -> None:
    t = spine_leaf(ecmp={"mode": "adaptive", "gap": "0s"})
    assert t.spec.ecmp.mode == "adaptive" and t.flowlet_gap() == 0.0
    assert spine_leaf(ecmp={"mode": "adaptive"}).flowlet_gap() == pytest.approx(2 * 300e3 * 8 / 100e6)
