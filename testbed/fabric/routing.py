"""Static L3 routes with ECMP groups installed, the routers' ECMP sysctls, and flow path prediction.

Routing is computed, not learned (no routing daemon): ``testbed.spec.topology.compute_routes`` plans every node's
routes from the fabric spec, and this module turns them into ``ip`` commands.
Path prediction asks each router's kernel (``ip route get ... ipproto P sport S dport D``), hop by hop, which
next hop the flow's hash picks: with ``fib_multipath_hash_policy=3`` and explicit hash fields that answer is
the path the flow's packets take (machine.md measured this).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING

from testbed.spec.link import EcmpSpec

if TYPE_CHECKING:
    from testbed.spec.topology import Route, Topology


def route_commands(routes: list[Route]) -> list[str]:
    """``ip -batch`` lines for one node's routes."""
    lines = []
    for r in routes:
        if len(r.nexthops) == 1:
            gw, dev = r.nexthops[0]
            lines.append(f"route replace {r.dst} via {gw} dev {dev}")
        else:
            hops = " ".join(f"nexthop via {gw} dev {dev} weight 1" for gw, dev in r.nexthops)
            lines.append(f"route replace {r.dst} {hops}")
    return lines


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
    netns: str, dst: str, src: str, iif: str | None, proto: str, sport: int, dport: int
) -> dict[str, str]:
    argv = ["ip", "-n", netns, "-j", "route", "get", dst, "from", src]
    if iif:
        argv += ["iif", iif]
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
) -> list[str]:
    """Node names a flow src->dst (hosts) crosses, from the routers' own ECMP choice for its 5-tuple."""
    src_ip, dst_ip = topo.hosts[src].ip, topo.hosts[dst].ip
    path = [src]
    node, iif = topo.hosts[src].leaf, f"{topo.hosts[src].leaf}-{src}"
    for _ in range(len(topo.nodes)):
        path.append(node)
        if node == dst:
            return path
        hop = _ip_route_get(netns_of(node), dst_ip, src_ip, iif, proto, sport, dport)
        dev = hop["dev"]
        peer = dev.split("-", 1)[1]
        iif = f"{peer}-{node}"
        node = peer
    raise RuntimeError(f"no path from {src} to {dst} within {len(topo.nodes)} hops (routing loop?)")
