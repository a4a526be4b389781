"""Routes around failed links (pure): what a routing protocol installs once a failure is detected.

The fabric's base routes aggregate (a leaf sends all of 10.0.0.0/8 up over every uplink), so a failure far away
needs more specific routes: when the link s1-l2 fails, every other leaf must stop sending l2's prefix to s1.
For each router and each rack prefix (a leaf's /16, a fat-tree edge's /24) this module finds the next hops on
the shortest valley-free paths (up, then down, as BGP in a Clos allows) over the links still up, and keeps those
that differ from what the router's base routes give once the kernel has dropped its own failed next hops. A
prefix the router can no longer reach becomes ``unreachable``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from testbed.spec.fields import SpecError
from testbed.spec.topology import LAYER_RANK, Link, Route, Topology


@dataclass(frozen=True)
class Override:
    """A more specific route a router needs while links are down; no next hops means unreachable."""

    node: str
    dst: str
    nexthops: tuple[tuple[str, str], ...]

    def command(self) -> str:
        """Its ``ip -batch`` line."""
        if not self.nexthops:
            return f"route replace unreachable {self.dst}"
        return Route(self.dst, self.nexthops).command()


def find_link(topo: Topology, name: str, path: str) -> Link:
    """The link named ``a-b`` (either order), or a SpecError naming ``path``."""
    a, _, b = name.partition("-")
    for lk in topo.links:
        if {lk.a, lk.b} == {a, b}:
            return lk
    raise SpecError(path, f"no link {name!r} in this fabric (links are named by their two nodes, e.g. l1-s1)")


def rack_prefixes(topo: Topology) -> dict[str, str]:
    """Each leaf's (or fat-tree edge's) prefix: the hosts below it."""
    out = {}
    for name, node in topo.nodes.items():
        if node.layer == "leaf":
            out[name] = f"10.{node.pos[0]}.0.0/16"
        elif node.layer == "edge":
            out[name] = f"10.{node.pos[0]}.{node.pos[1]}.0/24"
    return out


def _live(topo: Topology, failed: Iterable[Link]) -> list[tuple[str, str, str, str]]:
    """(upper, lower, upper's gateway to lower, upper's dev) and the reverse, for every router link still up."""
    down = set(failed)
    out = []
    for lk in topo.links:
        if lk in down or not (topo.nodes[lk.a].is_router and topo.nodes[lk.b].is_router):
            continue
        out.append((lk.a, lk.b, lk.b_addr, lk.a_dev))
        out.append((lk.b, lk.a, lk.a_addr, lk.b_dev))
    return out


def _paths_to(topo: Topology, dest: str, live: list[tuple[str, str, str, str]]) -> dict[str, tuple[int, list[Any]]]:
    """router -> (valley-free distance to ``dest``, next hops (gw, dev)) over the live links."""
    rank = {n: LAYER_RANK[topo.nodes[n].layer] for n in topo.nodes}
    down_dist = {dest: 0}  # pure-down distance: walk up from dest, one layer at a time
    for layer in sorted(set(rank.values())):
        for a, b, _, _ in live:
            if rank[a] == layer and rank[a] > rank[b] and b in down_dist:
                down_dist[a] = min(down_dist.get(a, 10**6), down_dist[b] + 1)
    best: dict[str, tuple[int, list[Any]]] = {}
    for layer in sorted(set(rank.values()), reverse=True):  # the top first: up-then-down needs the layer above
        for node in (n for n in topo.nodes if rank[n] == layer and topo.nodes[n].is_router and n != dest):
            options = []
            for a, b, gw, dev in live:
                if a != node:
                    continue
                if rank[b] < rank[a] and b in down_dist:
                    options.append((down_dist[b] + 1, (gw, dev)))
                elif rank[b] > rank[a] and b in best:
                    options.append((best[b][0] + 1, (gw, dev)))
            if options:
                d = min(o[0] for o in options)
                best[node] = (d, sorted(h for dd, h in options if dd == d))
    return best


def _base_hops(routes: list[Route], prefix: str, dead: set[str]) -> tuple[tuple[str, str], ...]:
    """The next hops the base routes give ``prefix`` (longest match), less those on dead devices."""
    net = ipaddress.IPv4Network(prefix)
    match = [r for r in routes if r.dst != "default" and net.subnet_of(ipaddress.IPv4Network(r.dst))]
    if not match:
        return ()
    r = max(match, key=lambda r: ipaddress.IPv4Network(r.dst).prefixlen)
    return tuple(h for h in r.nexthops if h[1] not in dead)


def overrides(topo: Topology, failed: Iterable[Link]) -> list[Override]:
    """Every route a router needs beyond its base routes while ``failed`` are down, in node and prefix order."""
    failed = list(failed)
    dead = {d for lk in failed for d in (lk.a_dev, lk.b_dev)}
    live = _live(topo, failed)
    out = []
    for dest, prefix in rack_prefixes(topo).items():
        paths = _paths_to(topo, dest, live)
        for node in topo.nodes:
            if not topo.nodes[node].is_router or node == dest:
                continue
            want = tuple(paths[node][1]) if node in paths else ()
            if sorted(want) != sorted(_base_hops(topo.routes[node], prefix, dead)):
                out.append(Override(node, prefix, want))
    return sorted(out, key=lambda o: (o.node, o.dst))
