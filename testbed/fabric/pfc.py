"""Where PFC-style pauses act (``pfc_plan``) and whether the buffers can hold what arrives while a pause takes
effect (``check_headroom``): pure, from the topology's ports; testbed.pfc runs the pauses.

A lossless class is judged on each router's egress queue of the class. When the queue passes XOFF, every port
upstream of the router that sent into it since it was last below XON pauses the class, until the queue is below
XON again (an upstream port stays paused while any queue holds it). Until a pause takes effect the upstream port
keeps sending: for the controller's reaction time at the link's rate, plus the frame on the wire and the one the
paused queue lets go (testbed.fabric.tc.pause_leaf). A queue's buffer must hold XOFF plus that headroom from each
ingress port that can feed it, or the class drops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from testbed.spec.classes import htb_plan
from testbed.spec.fields import SpecError
from testbed.spec.link import ETH_HEADER
from testbed.spec.topology import Port

# The reaction time the headroom is sized for: the XOFF crossing (BPF, at enqueue) to the upstream class paused
# (netlink acknowledged). The manifest's pfc.reaction_us gives what a run measured (docs/pfc.md).
REACTION_BOUND_S = 0.002
IN_FLIGHT_FRAMES = 2  # the frame being sent when the pause lands, and the one the paused tbf's bucket lets go
MAX_INGRESS = 64  # ingress ports per router the program can tell apart (a 64-bit mask per queue)


@dataclass(frozen=True)
class LosslessQueue:
    """A router's egress queue of a lossless class: what the program watches."""

    router: str
    dev: str
    cls: str
    dscp: tuple[int, ...]
    minor: int  # the class's HTB minor at this port
    xoff: int  # bytes
    xon: int
    buffer: int
    peer: str

    @property
    def name(self) -> str:
        return f"{self.router}->{self.peer}"


@dataclass(frozen=True)
class PauseFeed:
    """An ingress port of a router, in one lossless class, and the upstream egress port that pauses for it."""

    router: str
    ingress_dev: str  # the router's interface the class's packets come in on
    bit: int  # its bit in a queue's feeders (0..63, per router)
    cls: str
    upstream: str
    upstream_dev: str
    upstream_minor: int
    rate_bps: int  # the upstream port's rate
    frame: int
    buffer: int  # the upstream class's buffer in bytes (its tbf's limit, restated on every change)

    @property
    def name(self) -> str:
        return f"{self.upstream}->{self.router}"

    @property
    def headroom(self) -> int:
        """Bytes that may still arrive from this port after its router's queue crosses XOFF."""
        return int(REACTION_BOUND_S * self.rate_bps / 8) + IN_FLIGHT_FRAMES * self.frame


@dataclass(frozen=True)
class PfcPlan:
    queues: tuple[LosslessQueue, ...]
    feeds: tuple[PauseFeed, ...]

    def __bool__(self) -> bool:
        return bool(self.queues)


def _lossless(port: Port) -> list[tuple[int, int]]:
    """(class index, HTB minor) of the port's lossless classes."""
    plan = htb_plan(port.link.classes, port.link.mtu + ETH_HEADER)
    return [(i, h.minor) for i, (c, h) in enumerate(zip(port.link.classes, plan, strict=True)) if c.lossless]


def pfc_plan(ports: Sequence[Port]) -> PfcPlan:
    """The lossless queues at routers and the feeds into them (an upstream port carrying the class losslessly into
    a router that forwards it losslessly). SpecError when a router's ports give one DSCP to different lossless
    classes (the program tells a packet's class by its DSCP at the router)."""
    queues: list[LosslessQueue] = []
    dscp_at: dict[tuple[str, int], tuple[str, int]] = {}
    for p in ports:
        if p.layer == "host":
            continue
        for i, minor in _lossless(p):
            c = p.link.classes[i]
            assert c.lossless is not None
            for d in c.dscp:
                seen = dscp_at.setdefault((p.node, d), (c.name, minor))
                if seen != (c.name, minor):
                    raise SpecError(
                        f"port {p.name} class {c.name}",
                        f"DSCP {d} is lossless class 1:{minor:x} here but 1:{seen[1]:x} ({seen[0]}) on another port "
                        f"of {p.node}: a router's ports must list their lossless classes alike (give the classes in "
                        "the link defaults)",
                    )
            mtu = p.link.mtu
            queues.append(
                LosslessQueue(p.node, p.dev, c.name, c.dscp, minor, c.lossless.xoff.to_bytes(mtu),
                              c.lossless.xon.to_bytes(mtu), p.link.class_buffer(c).to_bytes(mtu), p.peer)
            )  # fmt: skip
    routers = {(q.router, q.cls) for q in queues}
    feeds: list[PauseFeed] = []
    bits: dict[tuple[str, str], int] = {}
    for u in ports:
        for i, minor in _lossless(u):
            c = u.link.classes[i]
            if (u.peer, c.name) not in routers:
                continue
            bit = bits.setdefault((u.peer, u.peer_dev), len([r for r, _ in bits if r == u.peer]))
            if bit >= MAX_INGRESS:
                raise SpecError(f"node {u.peer}", f"more than {MAX_INGRESS} ingress ports carry lossless classes")
            feeds.append(
                PauseFeed(u.peer, u.peer_dev, bit, c.name, u.node, u.dev, minor, u.link.rate_bps,
                          u.link.mtu + ETH_HEADER, u.link.class_buffer(c).to_bytes(u.link.mtu))
            )  # fmt: skip
    return PfcPlan(tuple(queues), tuple(feeds))


def check_headroom(plan: PfcPlan) -> None:
    """SpecError when a lossless queue cannot hold XOFF plus the headroom of every ingress port that can feed it
    (all but its own peer's): then a pause comes too late and the class drops."""
    for q in plan.queues:
        feeds = [f for f in plan.feeds if f.router == q.router and f.cls == q.cls and f.upstream != q.peer]
        need = q.xoff + sum(f.headroom for f in feeds)
        if need > q.buffer:
            f = max(feeds, key=lambda f: f.headroom)
            raise SpecError(
                f"port {q.name} class {q.cls}",
                f"buffer {q.buffer} bytes cannot hold XOFF {q.xoff} plus what its {len(feeds)} ingress ports may "
                f"send before they pause ({need - q.xoff} bytes: {REACTION_BOUND_S * 1e3:g} ms of reaction at "
                f"each one's rate and {IN_FLIGHT_FRAMES} frames, e.g. {f.headroom} from {f.name}); raise the "
                "class's buffer or lower xoff",
            )
