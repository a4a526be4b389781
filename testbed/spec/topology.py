"""Nodes, links, names and addresses of a fabric, derived from position (pure logic, no system calls).

Naming and addressing scheme (1-based indices everywhere):

spine-leaf
  - spine ``s<i>``, leaf ``l<j>``, host ``l<j>h<k>`` (leaf j's host k).
  - host link ``l<j>h<k>``-``l<j>``: subnet ``10.j.k.0/24``, leaf side ``10.j.k.1``, host ``10.j.k.2``.
    Leaf j's hosts aggregate to ``10.j.0.0/16`` (the rack prefix the spines route).
  - leaf-spine links: ``/30`` subnets carved in order from ``172.16.0.0/12``: link (spine i, leaf j) is number
    ``(i-1)*leaves + (j-1)``; spine side ``.1``, leaf side ``.2`` of its /30.

fat-tree (k-ary, k even): pods ``p1..pk``, each with edge ``p<p>e<e>`` and aggregation ``p<p>a<a>`` switches
  (k/2 of each), cores ``c1..c(k/2)^2``; host ``p<p>e<e>h<h>``. Core c connects to aggregation switch
  ``a = (c-1) // (k/2) + 1`` of every pod.
  - host link: ``10.p.e.(4h)/30``, edge side ``+1``, host ``+2``. Edge (p,e) aggregates ``10.p.e.0/24``,
    pod p ``10.p.0.0/16``.
  - edge-agg then agg-core links: ``/30`` subnets from ``172.16.0.0/12`` in that order.

Interfaces: on node X the interface towards node Y is ``X-Y`` (at most 15 characters, which holds for every
topology the spec accepts). ``direction`` of an egress port is ``up`` (towards the spines/cores) or ``down``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from testbed.spec.classes import TrafficClass
from testbed.spec.fabric import FabricSpec
from testbed.spec.fields import SpecError
from testbed.spec.link import LinkSpec

FABRIC_POOL = ipaddress.IPv4Network("172.16.0.0/12")
LAYER_RANK = {"host": 0, "leaf": 1, "edge": 1, "agg": 2, "spine": 2, "core": 3}


@dataclass(frozen=True)
class Node:
    name: str
    layer: str  # host | leaf | spine | edge | agg | core
    pos: tuple[int, ...]  # (leaf, host) / (spine,) / (pod, edge, host) ...

    @property
    def is_router(self) -> bool:
        return self.layer != "host"


@dataclass(frozen=True)
class Port:
    """One egress port: the interface ``dev`` on ``node`` whose queue sends towards ``peer``."""

    node: str
    dev: str
    peer: str
    peer_dev: str
    addr: str  # this side's address, e.g. "10.1.2.1"
    peer_addr: str
    prefixlen: int
    link: LinkSpec
    direction: str  # up | down
    layer: str
    peer_layer: str

    @property
    def name(self) -> str:
        return f"{self.node}->{self.peer}"


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    a_addr: str
    b_addr: str
    prefixlen: int
    a_spec: LinkSpec  # egress of a (towards b)
    b_spec: LinkSpec  # egress of b (towards a)

    @property
    def a_dev(self) -> str:
        return f"{self.a}-{self.b}"

    @property
    def b_dev(self) -> str:
        return f"{self.b}-{self.a}"


@dataclass(frozen=True)
class HostInfo:
    """What a traffic generator needs to know about a host. ``netns`` is filled in once the fabric is built."""

    name: str
    ip: str
    leaf: str  # the leaf (edge switch) it hangs off
    netns: str = ""
    pod: int = 0


@dataclass(frozen=True)
class Route:
    """``dst`` via one or more (gateway, dev) next hops; more than one is an ECMP group."""

    dst: str
    nexthops: tuple[tuple[str, str], ...]

    def command(self, table: int | None = None) -> str:
        """Its ``ip -batch`` line (in routing table ``table``, or the main table)."""
        where = f" table {table}" if table is not None else ""
        if len(self.nexthops) == 1:
            gw, dev = self.nexthops[0]
            return f"route replace {self.dst} via {gw} dev {dev}{where}"
        hops = " ".join(f"nexthop via {gw} dev {dev} weight 1" for gw, dev in self.nexthops)
        return f"route replace {self.dst} {hops}{where}"


class Topology:
    """The graph of a fabric: nodes in layer order, links, and the static routes of every node."""

    def __init__(self, spec: FabricSpec):
        self.spec = spec
        self.nodes: dict[str, Node] = {}
        self.links: list[Link] = []
        self.hosts: dict[str, HostInfo] = {}
        self._fabric_links = 0
        if spec.topology == "spine-leaf":
            self._spine_leaf()
        else:
            self._fat_tree()
        self._check_overrides()
        self.routes: dict[str, list[Route]] = compute_routes(self)

    # --- construction ------------------------------------------------------------------------------------------
    def _add(self, name: str, layer: str, *pos: int) -> None:
        self.nodes[name] = Node(name, layer, tuple(pos))

    def _link(self, a: str, b: str, a_addr: str, b_addr: str, prefixlen: int, base: LinkSpec) -> None:
        spec = self.spec
        if len(a) + len(b) + 1 > 15:
            raise SpecError("fabric", f"interface name {a}-{b} is longer than the kernel's 15 characters")
        self.links.append(Link(a, b, a_addr, b_addr, prefixlen, spec.link_for(a, b, base), spec.link_for(b, a, base)))

    def _fabric_subnet(self) -> tuple[str, str]:
        net = ipaddress.IPv4Network((int(FABRIC_POOL.network_address) + 4 * self._fabric_links, 30))
        if not net.subnet_of(FABRIC_POOL):
            raise SpecError("fabric", "too many fabric links for the 172.16.0.0/12 pool")
        self._fabric_links += 1
        return str(net.network_address + 1), str(net.network_address + 2)

    def _spine_leaf(self) -> None:
        s = self.spec
        for i in range(1, s.spines + 1):
            self._add(f"s{i}", "spine", i)
        for j in range(1, s.leaves + 1):
            self._add(f"l{j}", "leaf", j)
        for j in range(1, s.leaves + 1):
            for k in range(1, s.hosts_per_leaf + 1):
                name = f"l{j}h{k}"
                self._add(name, "host", j, k)
                ip = f"10.{j}.{k}.2"
                self.hosts[name] = HostInfo(name, ip, f"l{j}", pod=j)
                self._link(f"l{j}", name, f"10.{j}.{k}.1", ip, 24, s.host_link)
        for i in range(1, s.spines + 1):
            for j in range(1, s.leaves + 1):
                spine_ip, leaf_ip = self._fabric_subnet()
                self._link(f"s{i}", f"l{j}", spine_ip, leaf_ip, 30, s.fabric_link)

    def _fat_tree(self) -> None:
        s = self.spec
        half = s.k // 2
        for c in range(1, half * half + 1):
            self._add(f"c{c}", "core", c)
        for p in range(1, s.k + 1):
            for a in range(1, half + 1):
                self._add(f"p{p}a{a}", "agg", p, a)
            for e in range(1, half + 1):
                self._add(f"p{p}e{e}", "edge", p, e)
                for h in range(1, half + 1):
                    name = f"p{p}e{e}h{h}"
                    self._add(name, "host", p, e, h)
                    ip = f"10.{p}.{e}.{4 * h + 2}"
                    self.hosts[name] = HostInfo(name, ip, f"p{p}e{e}", pod=p)
                    self._link(f"p{p}e{e}", name, f"10.{p}.{e}.{4 * h + 1}", ip, 30, s.host_link)
        for p in range(1, s.k + 1):
            for e in range(1, half + 1):
                for a in range(1, half + 1):
                    agg_ip, edge_ip = self._fabric_subnet()
                    self._link(f"p{p}a{a}", f"p{p}e{e}", agg_ip, edge_ip, 30, s.fabric_link)
        for c in range(1, half * half + 1):
            a = (c - 1) // half + 1
            for p in range(1, s.k + 1):
                core_ip, agg_ip = self._fabric_subnet()
                self._link(f"c{c}", f"p{p}a{a}", core_ip, agg_ip, 30, s.fabric_link)

    def _check_overrides(self) -> None:
        pairs = {(lk.a, lk.b) for lk in self.links} | {(lk.b, lk.a) for lk in self.links}
        for i, ov in enumerate(self.spec.overrides):
            if (ov.src, ov.dst) not in pairs:
                known = ", ".join(sorted(f"{a}->{b}" for a, b in pairs)[:6])
                raise SpecError(
                    f"fabric.overrides[{i}]",
                    f"{ov.selector!r} names no link of this fabric (ports look like {known}, ...)",
                )

    # --- queries -----------------------------------------------------------------------------------------------
    def ports(self) -> list[Port]:
        """Every egress port, both directions of every link, in link order."""
        out: list[Port] = []
        for lk in self.links:
            la, lb = self.nodes[lk.a].layer, self.nodes[lk.b].layer
            up_a = "up" if LAYER_RANK[lb] > LAYER_RANK[la] else "down"
            up_b = "up" if up_a == "down" else "down"
            out.append(
                Port(lk.a, lk.a_dev, lk.b, lk.b_dev, lk.a_addr, lk.b_addr, lk.prefixlen, lk.a_spec, up_a, la, lb)
            )
            out.append(
                Port(lk.b, lk.b_dev, lk.a, lk.a_dev, lk.b_addr, lk.a_addr, lk.prefixlen, lk.b_spec, up_b, lb, la)
            )
        return out

    def ports_of(self, node: str) -> list[Port]:
        return [p for p in self.ports() if p.node == node]

    def owner_of(self, addr: str) -> str:
        """The node that holds interface address ``addr``."""
        for lk in self.links:
            if lk.a_addr == addr:
                return lk.a
            if lk.b_addr == addr:
                return lk.b
        raise KeyError(addr)

    def routers(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_router]

    def flowlet_gap(self) -> float:
        """Flowlet mode's idle gap unless the spec gives one (``ecmp.gap``): the most two equal-cost paths'
        queueing can differ, a full buffer at the slowest-draining router-to-router port on every router-to-router
        hop of the longest path (2 in a spine-leaf, 4 in a fat-tree), so a new flowlet cannot overtake the last."""
        if self.spec.ecmp.gap_s is not None:
            return self.spec.ecmp.gap_s
        inner = [p for p in self.ports() if self.nodes[p.node].is_router and self.nodes[p.peer].is_router]
        hops = 2 * (len({n.layer for n in self.routers()}) - 1)
        return hops * max((p.link.buffer_bytes * 8 / p.link.rate_bps for p in inner), default=0.0)

    def describe(self) -> dict[str, object]:
        """The fabric as plain data, for the run manifest."""
        return {
            "topology": self.spec.topology,
            "oversubscription": float(self.spec.oversubscription),
            "nodes": [
                {"name": n.name, "layer": n.layer, **({"ip": self.hosts[n.name].ip} if n.name in self.hosts else {})}
                for n in self.nodes.values()
            ],
            "ports": [
                {
                    "node": p.node,
                    "dev": p.dev,
                    "peer": p.peer,
                    "layer": p.layer,
                    "peer_layer": p.peer_layer,
                    "direction": p.direction,
                    "addr": p.addr,
                    "rate_bps": p.link.rate_bps,
                    "buffer_bytes": p.link.buffer_bytes,
                    "mtu": p.link.mtu,
                    "loss": p.link.loss,
                    "delay_s": p.link.delay_s,
                    "marking": p.link.marking.describe(),
                    **({"classes": [_class_entry(p.link, c) for c in p.link.classes]} if p.link.classes else {}),
                }
                for p in self.ports()
            ],
        }


def _class_entry(link: LinkSpec, c: TrafficClass) -> dict[str, Any]:
    """One traffic class of a port, for the manifest."""
    kind = {"priority": c.priority} if c.priority is not None else {"weight": c.weight}
    marking = link.class_marking(c).describe()
    return {
        "name": c.name,
        "dscp": list(c.dscp),
        **kind,
        "buffer_bytes": link.class_buffer(c).to_bytes(link.mtu),
        "marking": marking,
    }


def compute_routes(topo: Topology) -> dict[str, list[Route]]:
    """Every node's static routes: hosts default to their leaf, leaves and edges send non-local traffic to all
    uplinks as one multipath group, spines, aggregation and core route each rack or pod prefix down."""
    routes: dict[str, list[Route]] = {name: [] for name in topo.nodes}
    ports = topo.ports()
    up: dict[str, list[tuple[str, str]]] = {}
    down: dict[str, list[tuple[str, str, str]]] = {}  # node -> (peer, gateway, dev)
    for p in ports:
        if p.direction == "up":
            up.setdefault(p.node, []).append((p.peer_addr, p.dev))
        else:
            down.setdefault(p.node, []).append((p.peer, p.peer_addr, p.dev))

    for name, node in topo.nodes.items():
        if node.layer == "host":
            (gw, dev) = up[name][0]
            routes[name].append(Route("default", ((gw, dev),)))
        elif node.layer in ("leaf", "edge"):
            routes[name].append(Route("10.0.0.0/8", tuple(up[name])))
        elif node.layer == "spine":
            for peer, gw, dev in down[name]:
                routes[name].append(Route(f"10.{topo.nodes[peer].pos[0]}.0.0/16", ((gw, dev),)))
        elif node.layer == "agg":
            for peer, gw, dev in down[name]:
                pod, edge = topo.nodes[peer].pos[:2]
                routes[name].append(Route(f"10.{pod}.{edge}.0/24", ((gw, dev),)))
            routes[name].append(Route("10.0.0.0/8", tuple(up[name])))
        elif node.layer == "core":
            for peer, gw, dev in down[name]:
                routes[name].append(Route(f"10.{topo.nodes[peer].pos[0]}.0.0/16", ((gw, dev),)))
    return routes
