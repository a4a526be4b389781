"""Tell Mininet's objects what the fabric set up around them, so its CLI and helpers see the routed fabric.

The fabric sets every address with iproute2 (testbed.fabric.build), outside Mininet's Intf objects, which then
report no IP: `pingall` pinged "None" and `iperf` failed on ``server.IP()``. Here each Intf gets its port's
address, prefix and MAC, and the routers move from Mininet's host list to its switch list: Mininet's host-to-host
helpers (pingall, pingpair, iperf) mean end hosts, and a router is the fabric's forwarding node.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from testbed.spec.topology import Topology


def _macs(netns: str) -> dict[str, str]:
    """Interface name -> MAC address in a namespace (``ip -j link``)."""
    out = subprocess.run(["ip", "-n", netns, "-j", "link", "show"], capture_output=True, text=True, check=True)
    return {str(d["ifname"]): str(d.get("address", "")) for d in json.loads(out.stdout or "[]")}


def sync(net: Any, topo: Topology, netns_of: Any) -> None:
    """Set the Mininet network ``net``'s interfaces to the ports' addresses, prefixes and MACs; hosts are the end
    hosts, switches the routers (``netns_of``: node name -> its namespace)."""
    ports = {(p.node, p.dev): p for p in topo.ports()}
    for name in topo.nodes:
        node = net[name]
        macs = _macs(netns_of(name))
        for intf in node.intfList():
            port = ports.get((name, intf.name))
            if port is not None:
                intf.ip, intf.prefixLen = port.addr, port.prefixlen
            intf.mac = macs.get(intf.name) or intf.mac
    routers = {n.name for n in topo.routers()}
    everyone = list(net.hosts) + [s for s in net.switches if s not in net.hosts]
    net.hosts = [n for n in everyone if n.name not in routers]
    net.switches = [n for n in everyone if n.name in routers]
