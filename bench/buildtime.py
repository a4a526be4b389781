"""Figure (b): fabric build + teardown time, our engine vs stock Mininet building the same routed topology.

Ours: ``Fabric(spec)`` build (Mininet nodes, named namespaces, addresses, sysctls, checked tc htb + bfifo on every
egress, ECMP routes, ownership state) and teardown (until every namespace is deleted); the capability probe runs
once beforehand and is not counted. Stock: ``bench.stock.stock_net`` (Topo + LinuxRouter + TCLink(bw) + IP params +
routes via node.cmd) and ``net.stop()``. Both at 100 Mbit/s, MTU 9000 (stock: MTU set per interface).

Imports are a process's once, not a build's: Mininet's (both) and pyroute2's (ours: the namespace work of
testbed/host/netns.py) are imported before the first timing (``warm``), as a sweep's later points find them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench.ring import settle
from bench.stock import stock_net
from testbed.fabric.build import Fabric
from testbed.host.capabilities import Capabilities
from testbed.spec.fabric import FabricSpec

TOPOLOGIES: dict[str, dict[str, Any]] = {
    "2x4x2": {"topology": "spine-leaf", "spines": 2, "leaves": 4, "hosts_per_leaf": 2},
    "4x8x4": {"topology": "spine-leaf", "spines": 4, "leaves": 8, "hosts_per_leaf": 4},
    "fat-tree k=4": {"topology": "fat-tree", "k": 4},
}


@dataclass
class BuildTimes:
    name: str
    nodes: int
    links: int
    ours_build_s: float
    ours_teardown_s: float
    stock_build_s: float
    stock_teardown_s: float

    @property
    def ours_s(self) -> float:
        return self.ours_build_s + self.ours_teardown_s

    @property
    def stock_s(self) -> float:
        return self.stock_build_s + self.stock_teardown_s


def spec_for(name: str) -> FabricSpec:
    return FabricSpec.from_dict({**TOPOLOGIES[name], "host_link": {"rate": "100Mbit", "mtu": 9000}})


def time_ours(spec: FabricSpec, caps: Capabilities) -> tuple[float, float, int, int]:
    fab = Fabric(spec, caps=caps, lock_wait=30)
    t0 = time.monotonic()
    fab.build()
    t1 = time.monotonic()
    fab.teardown()
    return t1 - t0, time.monotonic() - t1, len(fab.topo.nodes), len(fab.topo.links)


def time_stock(spec: FabricSpec) -> tuple[float, float]:
    t0 = time.monotonic()
    cm = stock_net(spec, 100, 9000)
    cm.__enter__()
    t1 = time.monotonic()
    cm.__exit__(None, None, None)
    return t1 - t0, time.monotonic() - t1


def warm() -> None:
    """Import what either build imports on first use, so that neither timing holds an import."""
    import mininet.net  # noqa: F401
    import pyroute2.ethtool.ioctl
    import pyroute2.netns  # noqa: F401


def measure(name: str, caps: Capabilities) -> BuildTimes:
    warm()
    spec = spec_for(name)
    settle()
    ob, ot, nodes, links = time_ours(spec, caps)
    settle()
    sb, st = time_stock(spec)
    return BuildTimes(name, nodes, links, ob, ot, sb, st)
