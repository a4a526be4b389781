"""tc and nftables command lines that shape one egress port (pure: building only; `fabric.py` runs them).

Every egress port gets the same tree::

    root 1: htb default 1            rate limiting (HTB counts Ethernet frames: MTU + 14 bytes)
      class 1:1 htb rate R ceil R
        leaf 10: bfifo limit B       the buffer (pfifo for a buffer in packets; sch_red for kernel ECN marking)

Why tc batch lines and not pyroute2: pyroute2 has no bfifo plugin and reports a missing qdisc as EINVAL
(machine.md), and `tc -batch` stops at the first failing line with its line number, which we turn into an error.
Random loss uses an nftables ``numgen random`` rule (this kernel has no netem); delay needs netem, applied on an
ifb at the receiving side so the egress queue above stays the only queue.
"""

from __future__ import annotations

from collections.abc import Callable

from testbed.spec.link import ETH_HEADER, LinkSpec
from testbed.spec.topology import Port

ROOT_HANDLE = "1:"
CLASS_ID = "1:1"
LEAF_HANDLE = "10:"

LeafBuilder = Callable[[LinkSpec], list[str]]


def droptail_leaf(link: LinkSpec) -> list[str]:
    """The drop-tail buffer: bfifo for a byte limit, pfifo for a packet limit."""
    if link.buffer.unit == "packets":
        return ["pfifo", "limit", str(link.buffer.value)]
    return ["bfifo", "limit", str(link.buffer.value)]


def htb_burst(link: LinkSpec) -> int:
    """HTB bucket depth: two full frames, so the shaper never sends a burst at line rate longer than that."""
    return 2 * (link.mtu + ETH_HEADER)


def port_tc_lines(port: Port, leaf: LeafBuilder = droptail_leaf) -> list[str]:
    """``tc -batch`` lines (without the leading ``tc``) for one egress port."""
    link, dev = port.link, port.dev
    frame = link.mtu + ETH_HEADER
    burst = htb_burst(link)
    return [
        f"qdisc replace dev {dev} root handle {ROOT_HANDLE} htb default 1",
        f"class add dev {dev} parent {ROOT_HANDLE} classid {CLASS_ID} htb rate {link.rate_bps}bit ceil {link.rate_bps}bit "
        f"burst {burst} cburst {burst} quantum {frame}",
        f"qdisc add dev {dev} parent {CLASS_ID} handle {LEAF_HANDLE} " + " ".join(leaf(link)),
    ]


def delay_tc_lines(port: Port, ifb: str) -> list[str]:
    """Delay on the receiving side: the peer's ingress is redirected to an ifb whose root is netem.

    Runs in the peer's namespace (``ip link add {ifb} type ifb`` first). u32 match-all because this kernel lacks
    matchall. The netem limit is large: it only holds packets in flight on the wire, the queue is upstream.
    """
    limit = 100_000
    us = int(round(port.link.delay_s * 1e6))
    return [
        f"qdisc add dev {port.peer_dev} handle ffff: ingress",
        f"filter add dev {port.peer_dev} parent ffff: protocol all prio 1 u32 match u32 0 0 "
        f"action mirred egress redirect dev {ifb}",
        f"qdisc replace dev {ifb} root netem delay {us}us limit {limit}",
    ]


def loss_nft_rules(table: str, ports: list[Port]) -> str:
    """An nftables script dropping a random share of packets leaving each lossy port (one namespace)."""
    lines = [
        f"table inet {table} {{",
        "  chain postrouting {",
        "    type filter hook postrouting priority 0; policy accept;",
    ]
    for p in ports:
        if p.link.loss > 0:
            per_million = int(round(p.link.loss * 1_000_000))
            lines.append(f'    oifname "{p.dev}" numgen random mod 1000000 < {per_million} counter drop')
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"
