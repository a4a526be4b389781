"""Stock Mininet building the same routed topology its own way, for the comparisons in the benchmark.

``mininet.topo.Topo`` with ``LinuxRouter`` nodes (mininet/examples/linuxrouter.py) and ``TCLink(bw=...)`` on every
link (its bw is the only TCLink option that works on a kernel without netem/RED; TCLink ignores bw > 1000), IP
addresses as link params, routes with ``node.cmd('ip route ...')``. Addresses and routes come from
``testbed.spec.topology`` so both emulators forward the same way. Mininet leaves GSO/TSO on (its default).

Interface names carry the bench prefix (``tbd7<node>-<peer>``, made in the root namespace before Mininet moves
them); Mininet's namespaces are unnamed. ``stock_net`` stops the network with ``net.stop()`` on every exit path and
never runs ``mn -c``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.fabric.routing import route_commands
from testbed.host.mininet_compat import import_mininet
from testbed.spec.fabric import FabricSpec
from testbed.spec.topology import Topology

PREFIX = "tbd7"


@dataclass
class StockNet:
    net: Any
    topo: Topology

    def node(self, name: str) -> Any:
        return self.net.get(name)

    def popen(self, host: str, argv: list[str], stdout: Path) -> subprocess.Popen[bytes]:
        with open(stdout, "wb") as fh:
            p: subprocess.Popen[bytes] = self.node(host).popen(argv, stdout=fh, stderr=subprocess.STDOUT)
        return p


def _classes() -> tuple[Any, Any, Any]:
    import_mininet()
    from mininet.link import TCLink
    from mininet.node import Node
    from mininet.topo import Topo

    class LinuxRouter(Node):  # type: ignore[misc]
        """A Node with IP forwarding enabled (mininet/examples/linuxrouter.py)."""

        def config(self, **params: Any) -> Any:
            r = super().config(**params)
            self.cmd("sysctl -q net.ipv4.ip_forward=1")
            return r

    return Topo, LinuxRouter, TCLink


def make_topo(topo: Topology, bw_mbit: float) -> Any:
    Topo, LinuxRouter, TCLink = _classes()

    class FabricTopo(Topo):  # type: ignore[misc,valid-type]
        def build(self, **_opts: Any) -> None:
            for name, node in topo.nodes.items():
                if node.is_router:
                    self.addNode(name, cls=LinuxRouter, ip=None)
                else:
                    self.addHost(name, ip=None)
            for lk in topo.links:
                self.addLink(
                    lk.a,
                    lk.b,
                    cls=TCLink,
                    bw=bw_mbit,
                    intfName1=f"{PREFIX}{lk.a_dev}",
                    intfName2=f"{PREFIX}{lk.b_dev}",
                    params1={"ip": f"{lk.a_addr}/{lk.prefixlen}"},
                    params2={"ip": f"{lk.b_addr}/{lk.prefixlen}"},
                )

    return FabricTopo()


def configure(net: Any, topo: Topology, mtu: int) -> None:
    """Routes (and the MTU when not 1500) through each node's shell, as a Mininet script does."""
    for name, routes in topo.routes.items():
        node = net.get(name)
        cmds = []
        if mtu != 1500:
            cmds += [f"ip link set dev {intf.name} mtu {mtu}" for intf in node.intfList() if intf.name != "lo"]
        for line in route_commands(routes):
            words = line.split()
            words = [f"{PREFIX}{w}" if i > 0 and words[i - 1] == "dev" else w for i, w in enumerate(words)]
            cmds.append("ip " + " ".join(words))
        if cmds:
            out = node.cmd(" && ".join(cmds) + " && echo tbd7-ok")
            if "tbd7-ok" not in out:
                raise RuntimeError(f"stock Mininet: configuring {name} failed: {out.strip()[-300:]}")


@contextmanager
def stock_net(spec: FabricSpec, bw_mbit: float, mtu: int = 1500) -> Iterator[StockNet]:
    import_mininet()
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    setLogLevel("critical")
    if bw_mbit > 1000:
        raise ValueError(f"TCLink ignores bw > 1000 Mbit/s (asked {bw_mbit})")
    topo = Topology(spec)
    net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False)
    try:
        net.topo = make_topo(topo, bw_mbit)
        net.build()
        configure(net, topo, mtu)
        yield StockNet(net, topo)
    finally:
        net.stop()
