"""Static L3 routes with ECMP groups installed, the routers' ECMP sysctls, and flow path prediction.

Routing is computed, not learned (no routing daemon): ``testbed.spec.topology.compute_routes`` plans every node's
routes from the fabric spec, and this module turns them into ``ip`` commands.
Path prediction asks each router's kernel (``ip route get ... ipproto P sport S dport D``), hop by hop, which
next hop the flow's hash picks: with ``fib_multipath_hash_policy=3`` and explicit hash fields that answer is
the path the flow's packets take.

Spraying (``ecmp.mode: spray``) is policy routing: an nftables rule at prerouting gives every packet a way
(``numgen``, 1..W), and way k looks up a table holding each ECMP route's k-th next hop. Each way's table is a
whole one (the node's connected subnets and single routes too): a rule's table wins whenever it has any match, so
an aggregate ECMP route alone would send a leaf's own hosts' traffic back up. A sprayed hop's prediction names
every next hop it uses.
"""

from __future__ import annotations

import ipaddress
import json
import math
import subprocess
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from testbed.spec.link import EcmpSpec

if TYPE_CHECKING:
    from testbed.spec.topology import Port, Route, Topology


def route_commands(routes: list[Route]) -> list[str]:
    """``ip -batch`` lines for one node's routes."""
    return [r.command() for r in routes]


SPRAY_TABLE = 100  # way k (1..W) looks up table SPRAY_TABLE + k
SPRAY_PREF = 1000  # its rule's priority: before the main table's (32766)


def spray_ways(routes: list[Route]) -> int:
    """How many ways a node sprays over: the least common multiple of its ECMP routes' next-hop counts (so each
    route's next hops get equal shares), 0 where it has no ECMP route."""
    counts = [len(r.nexthops) for r in routes if len(r.nexthops) > 1]
    return math.lcm(*counts) if counts else 0


def spray_commands(routes: list[Route], ports: list[Port]) -> list[str]:
    """``ip -batch`` lines for one node's spraying: a rule and a whole table per way (none without ECMP routes)."""
    ways = spray_ways(routes)
    lines = []
    for k in range(1, ways + 1):
        table = SPRAY_TABLE + k
        lines.append(f"rule add fwmark {k} lookup {table} pref {SPRAY_PREF + k}")
        for p in ports:
            net = ipaddress.ip_interface(f"{p.addr}/{p.prefixlen}").network
            lines.append(f"route replace {net} dev {p.dev} scope link table {table}")
        lines += [replace(r, nexthops=(r.nexthops[(k - 1) % len(r.nexthops)],)).command(table) for r in routes]
    return lines


def downlinks(routes: list[Route], ports: list[Port]) -> list[str]:
    """The node's ports that are no ECMP next hop: those whose arriving traffic may go up, and gets a way."""
    up = {dev for r in routes if len(r.nexthops) > 1 for _, dev in r.nexthops}
    return [p.dev for p in ports if p.dev not in up]


def spray_nft(routes: list[Route], ports: list[Port], pick: str) -> str:
    """The nftables script giving each packet a node receives on a downlink (``downlinks``) a way, 1..W, in turn or
    at random. Packets from the next hops keep no way: counting them too would interleave their turns with the
    upward ones', so round-robin would no longer alternate one flow's packets."""
    ways = spray_ways(routes)
    down = ", ".join(f'"{dev}"' for dev in downlinks(routes, ports))
    gen = "inc" if pick == "round-robin" else "random"
    return (
        "table ip testbed_spray {\n"
        "  chain prerouting {\n"
        "    type filter hook prerouting priority mangle; policy accept;\n"
        f"    iifname {{ {down} }} meta mark set numgen {gen} mod {ways} offset 1\n"
        "  }\n"
        "}\n"
    )


def router_sysctls(ecmp: EcmpSpec, has_seed_sysctl: bool) -> dict[str, str]:
    """Forwarding and deterministic ECMP hashing for a router namespace."""
    values = {
        "net.ipv4.ip_forward": "1",
        "net.ipv4.conf.all.rp_filter": "0",
        "net.ipv4.conf.default.rp_filter": "0",
        "net.ipv4.fib_multipath_hash_policy": "3",
        "net.ipv4.fib_multipath_hash_fields": f"0x{ecmp.hash_fields:04x}",
        "net.ipv6.conf.all.disable_ipv6": "1",
        "net.ipv6.conf.default.disable_ipv6": "1",
    }
    if ecmp.seed is not None:
        if not has_seed_sysctl:
            raise RuntimeError(
                "ecmp.seed needs net.ipv4.fib_multipath_hash_seed (Linux 6.11+); this kernel lacks it: drop the seed"
            )
        values["net.ipv4.fib_multipath_hash_seed"] = str(ecmp.seed)
    return values


Runner = Callable[[list[str]], str]


def _ip_route_get(
    netns: str, dst: str, src: str, iif: str | None, proto: str, sport: int, dport: int, mark: int = 0
) -> dict[str, str]:
    argv = ["ip", "-n", netns, "-j", "route", "get", dst, "from", src]
    if iif:
        argv += ["iif", iif]
    if mark:
        argv += ["mark", str(mark)]
    argv += ["ipproto", proto, "sport", str(sport), "dport", str(dport)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr.strip()}")
    answer = json.loads(out.stdout)
    if not answer:
        raise RuntimeError(f"{' '.join(argv)} gave no route")
    return dict(answer[0])


def predict_path(
    topo: Topology,
    netns_of: Callable[[str], str],
    src: str,
    dst: str,
    proto: str = "tcp",
    sport: int = 0,
    dport: int = 0,
    ways: Callable[[str], int] = lambda node: 0,
) -> list[str]:
    """Node names a flow src->dst (hosts) crosses, from the routers' own ECMP choice for its 5-tuple. Where a node
    sprays (``ways``: its way count), the hop is every next hop its ways use, joined by ``|``, and the path goes
    on through the first."""
    src_ip, dst_ip = topo.hosts[src].ip, topo.hosts[dst].ip
    path = [src]
    node, iif = topo.hosts[src].leaf, f"{topo.hosts[src].leaf}-{src}"
    label = node
    for _ in range(len(topo.nodes)):
        path.append(label)
        if node == dst:
            return path
        marks = range(1, ways(node) + 1) if ways(node) else [0]
        peers = [
            _ip_route_get(netns_of(node), dst_ip, src_ip, iif, proto, sport, dport, m)["dev"].split("-", 1)[1]
            for m in marks
        ]
        iif = f"{peers[0]}-{node}"
        node, label = peers[0], "|".join(dict.fromkeys(peers))
    raise RuntimeError(f"no path from {src} to {dst} within {len(topo.nodes)} hops (routing loop?)")
