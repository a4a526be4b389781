"""Bulk senders' TCP state over time (senders.csv): did each iperf3 client always have data to send?

A backlogged sender keeps unsent data in its socket. When the machine cannot run it (or its receiver) often enough,
the link idles for the sender's sake, not the link's: the socket runs out of unsent data while its congestion
window has room, or the receiver's window or the send buffer holds it (the kernel's ``tcpi_rwnd_limited`` /
``tcpi_sndbuf_limited`` timers). The fidelity guardrail ``sender_backlog`` reads this table.

``SenderPoller`` serves one namespace: a sock_diag dump (``sockdiag``) finds its sockets connected to the watched
ports, and each sample looks the known ones up (a lookup costs about a hundredth of a dump: docs/bench.md). A
namespace is dumped every ``DISCOVER_S`` while it has no known socket or lost one (an iperf3 cycle ended), else
every ``REDISCOVER_S``; the sampler lets one namespace dump per tick (many namespaces dumping in one tick stall the
queue sampler). Sockets to the same port that are not the flow's data stream (iperf3's control connection) are
recorded too; the guardrail keeps only the flows' own (flows.csv sport).
"""

from __future__ import annotations

from testbed.spec.schemas import SCHEMAS
from testbed.telemetry.netns import run_in_netns
from testbed.telemetry.ports import SenderRef
from testbed.telemetry.sockdiag import SockDiag, SockId
from testbed.telemetry.tcpinfo import TcpInfo

SENDERS_HEADER = SCHEMAS["senders"][0]
DISCOVER_S = 1.0  # how often a namespace is dumped while it has no known socket, or lost one
REDISCOVER_S = 5.0  # how often once its sockets are known (more streams may connect: iperf3 -P)


def sender_row(t: float, node: str, sid: SockId, ti: TcpInfo) -> tuple[object, ...]:
    return (
        t,
        node,
        sid.sport,
        sid.dport,
        int(ti.app_limited),
        ti.notsent_bytes,
        ti.unacked,
        ti.snd_cwnd,
        ti.bytes_acked,
        ti.busy_time_us,
        ti.rwnd_limited_us,
        ti.sndbuf_limited_us,
    )


class SenderPoller:
    """The watched TCP sockets of one namespace: ``poll(t, mono)`` -> senders.csv rows (see the module doc)."""

    def __init__(self, ref: SenderRef, diag: SockDiag | None = None):
        self.ref = ref
        self.dports = set(ref.dports)
        self.diag = diag if diag is not None else run_in_netns(ref.netns, SockDiag.create)
        self.known: dict[tuple[int, int], SockId] = {}
        self.next_dump = float("-inf")
        self.dumps = self.lookups = 0

    def due(self, mono: float) -> bool:
        """A dump is due (``poll`` with ``may_dump`` would dump)."""
        return mono >= self.next_dump

    def poll(self, t: float, mono: float, may_dump: bool = True) -> list[tuple[object, ...]]:
        if may_dump and mono >= self.next_dump:
            self.dumps += 1
            found = self.diag.dump(self.dports)
            self.known = {(s.sport, s.dport): s for s, _ti in found}
            self.next_dump = mono + (REDISCOVER_S if self.known else DISCOVER_S)
            return [sender_row(t, self.ref.node, s, ti) for s, ti in found]
        rows = []
        for key, sid in list(self.known.items()):
            self.lookups += 1
            ti = self.diag.lookup(sid)
            if ti is None:
                del self.known[key]
                self.next_dump = min(self.next_dump, mono + DISCOVER_S)
                continue
            rows.append(sender_row(t, self.ref.node, sid, ti))
        return rows

    def close(self) -> None:
        self.diag.close()
