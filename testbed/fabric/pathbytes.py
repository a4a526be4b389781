"""Per-flow bytes through each top-tier router (spine, or core in a fat-tree), counted in the router itself.

The predicted path names one spine per flow, and under static ECMP that is where all its bytes go. Spraying,
flowlets and adaptive routing spread one flow over several spines, so each top-tier router keeps an nftables set
keyed by the forwarded packet's 5-tuple, with a counter per element (IP bytes and packets, retransmissions
included). The run reads the sets once, at its end, and matches them to its flows. The table lives in the router's
namespace and goes with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from testbed.host.procs import run_checked
from testbed.spec.topology import Topology

TABLE = "testbed_paths"
SET_SIZE = 65535  # 5-tuples per router; a full set stops counting new ones, and the record says so
TOP_LAYERS = ("core", "spine")  # the top tier: cores in a fat-tree, spines in a spine-leaf fabric

NFT_SCRIPT = (
    f"table ip {TABLE} {{\n"
    "  set flows {\n"
    "    type ipv4_addr . ipv4_addr . inet_proto . inet_service . inet_service\n"
    f"    size {SET_SIZE}\n"
    "    flags dynamic\n"
    "    counter\n"
    "  }\n"
    "  chain forward {\n"
    "    type filter hook forward priority filter; policy accept;\n"
    "    meta l4proto { tcp, udp } update @flows { ip saddr . ip daddr . meta l4proto . th sport . th dport }\n"
    "  }\n"
    "}\n"
)

Key = tuple[str, str, str, int, int]  # src ip, dst ip, proto, sport, dport


@dataclass(frozen=True)
class Counted:
    bytes: int
    pkts: int


def top_tier(topo: Topology) -> list[str]:
    """The routers of the topology's top layer, where a flow's path splits show (none in a one-leaf fabric)."""
    for layer in TOP_LAYERS:
        nodes = [n for n, node in topo.nodes.items() if node.layer == layer]
        if nodes:
            return sorted(nodes)
    return []


def parse_set(text: str) -> dict[Key, Counted]:
    """``nft -j list set ip testbed_paths flows`` -> 5-tuple -> its counter."""
    out: dict[Key, Counted] = {}
    for item in json.loads(text).get("nftables", []):
        for elem in item.get("set", {}).get("elem", []):
            e = elem.get("elem", elem)
            src, dst, proto, sport, dport = e["val"]["concat"]
            c = e.get("counter") or {}
            out[(str(src), str(dst), str(proto), int(sport), int(dport))] = Counted(
                int(c.get("bytes", 0)), int(c.get("packets", 0))
            )
    return out


def per_flow(
    counted: Mapping[str, Mapping[Key, Counted]], flows: Iterable[Mapping[str, Any]], ip_of: Callable[[str], str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of the record's ``path_bytes`` table (one per flow and top-tier router it crossed) and the manifest's
    ``path_bytes`` summary: the routers, the flows matched, and the bytes no flow of the record owns (a workload's
    own connections, or a set that filled)."""
    index: dict[Key, Mapping[str, Any]] = {}
    for f in flows:
        if f.get("sport") not in (None, "") and f.get("dport") not in (None, ""):
            key = (ip_of(str(f["src"])), ip_of(str(f["dst"])), str(f["proto"]), int(f["sport"]), int(f["dport"]))
            index[key] = f
    rows: list[dict[str, Any]] = []
    matched: set[Key] = set()
    unmatched = 0
    for node in sorted(counted):
        for key, c in sorted(counted[node].items()):
            flow = index.get(key)
            if flow is None:
                unmatched += c.bytes
                continue
            matched.add(key)
            rows.append(
                {"job": flow["job"], "flow_id": flow["flow_id"], "node": node, "bytes": c.bytes, "pkts": c.pkts}
            )
    summary = {
        "nodes": sorted(counted),
        "flows": len(index),
        "flows_seen": len(matched),
        "unmatched_bytes": unmatched,
        "full": sorted(n for n, s in counted.items() if len(s) >= SET_SIZE),
    }
    return rows, summary


def attach(netns: str) -> None:
    """Start counting in one router's namespace."""
    run_checked(["nft", "-f", "-"], netns=netns, input=NFT_SCRIPT)


def read(netns: str) -> dict[Key, Counted]:
    """One router's counters now."""
    return parse_set(run_checked(["nft", "-j", "list", "set", "ip", TABLE, "flows"], netns=netns, timeout=60))
