"""tc and nftables command lines that shape one egress port (pure: building only; `fabric.py` runs them).

Every egress port gets the same tree::

    root 1: htb default 1            rate limiting (HTB counts Ethernet frames: MTU + 14 bytes)
      class 1:1 htb rate R ceil R
        leaf 10: bfifo limit B       the buffer (pfifo for a buffer in packets; sch_red for kernel ECN marking)

A port with traffic classes (``classes:``) has one HTB class per traffic class under 1:1 instead of leaf 10:
(``class_tc_lines``), each with its own leaf (handle 11:, 12:, ...), and u32 filters on the DSCP at the root.
A lossless class's leaf is a tbf (``pause_leaf``), which the PFC controller slows to pause it.

Why tc batch lines and not pyroute2: pyroute2 has no bfifo plugin and reports a missing qdisc as EINVAL,
and `tc -batch` stops at the first failing line with its line number, which we turn into an error.
Random loss uses an nftables ``numgen random`` rule (this kernel has no netem); delay needs netem, applied on an
ifb at the receiving side so the egress queue above stays the only queue.
"""

from __future__ import annotations

from collections.abc import Callable

from testbed.spec.classes import default_class, htb_plan
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
    default = f"{htb_plan(link.classes, frame)[default_class(link.classes)].minor:x}" if link.classes else "1"
    lines = [
        f"qdisc replace dev {dev} root handle {ROOT_HANDLE} htb default {default}",
        f"class add dev {dev} parent {ROOT_HANDLE} classid {CLASS_ID} htb rate {link.rate_bps}bit ceil {link.rate_bps}bit "
        f"burst {burst} cburst {burst} quantum {frame}",
    ]
    if not link.classes:
        return [*lines, f"qdisc add dev {dev} parent {CLASS_ID} handle {LEAF_HANDLE} " + " ".join(leaf(link))]
    return lines + class_tc_lines(port, leaf)


PFC_RUN_RATE_FACTOR = 100  # a lossless class's tbf runs this many times the port's rate: HTB alone shapes it
PFC_PAUSE_RATE_BPS = 1000  # ... and this slow while paused: one frame then waits 72 s (MTU 9000), a pause's end
CLASS_RATE_BPS = 1000  # each class's own (assured) rate: all but nothing, so every byte is lent by prio and quantum


def pause_leaf(link: LinkSpec, paused: bool = False) -> list[str]:
    """A lossless class's queue: a tbf that the PFC controller (testbed.pfc) slows to pause the class, holding
    the class's buffer in its bfifo. Its bucket is one frame, so a pause lets at most the frame at the head go
    (the frame on the wire when a PAUSE arrives)."""
    rate = PFC_PAUSE_RATE_BPS if paused else PFC_RUN_RATE_FACTOR * link.rate_bps
    return ["tbf", "rate", f"{rate}bit", "burst", str(link.mtu + ETH_HEADER), "limit", str(link.buffer_bytes)]


def class_tc_lines(port: Port, leaf: LeafBuilder = droptail_leaf) -> list[str]:
    """The traffic classes under class 1:1 (testbed.spec.classes): one HTB class, leaf and DSCP filters each.

    Every class borrows the port's rate from 1:1, which HTB lends to the lowest prio first (strict priority) and
    among one prio by deficit round robin on the quantum (weights). u32 matches the DSCP bits (mask 0xfc, so the
    ECN bits do not matter); what no filter takes goes to the root's default class."""
    link, dev = port.link, port.dev
    burst = htb_burst(link)
    lines = []
    for c, h in zip(link.classes, htb_plan(link.classes, link.mtu + ETH_HEADER), strict=True):
        lines += [
            f"class add dev {dev} parent {CLASS_ID} classid 1:{h.minor:x} htb rate {CLASS_RATE_BPS}bit "
            f"ceil {link.rate_bps}bit burst {burst} cburst {burst} prio {h.prio} quantum {h.quantum}",
            f"qdisc add dev {dev} parent 1:{h.minor:x} handle {h.minor:x}: "
            + " ".join(pause_leaf(link.class_link(c)) if c.lossless else leaf(link.class_link(c))),
        ]
        lines += [
            f"filter add dev {dev} parent {ROOT_HANDLE} protocol ip prio 1 u32 match ip dsfield {d << 2:#04x} 0xfc "
            f"flowid 1:{h.minor:x}"
            for d in c.dscp
        ]
    return lines


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
