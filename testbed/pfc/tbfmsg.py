"""The netlink request that pauses or resumes a lossless class: RTM_NEWQDISC changing the class's tbf leaf.

Hand-built with struct, not pyroute2: pyroute2's tbf has no TCA_TBF_BURST (its tick arithmetic rounds the burst
away from the one asked), and its NetNS proxy costs about a millisecond per change; a socket opened inside the
namespace and this 100-byte message take tens of microseconds (docs/bench.md).
"""

from __future__ import annotations

import socket
import struct

RTM_NEWQDISC = 36
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 2
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_BURST = 1, 4, 6
TC_LINKLAYER_ETHERNET = 1  # a rate with a link layer needs no rate table
NLA_F_NESTED = 0x8000


def _attr(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("<HH", n, kind) + payload + bytes((4 - n % 4) % 4)


def tbf_change(seq: int, ifindex: int, parent: int, handle: int, rate_bps: int, burst: int, limit: int) -> bytes:
    """The RTM_NEWQDISC message setting tbf ``handle`` (under class ``parent``) to ``rate_bps`` with a bucket of
    ``burst`` bytes and a queue of ``limit`` bytes (the tbf's bfifo keeps its packets: only its limit is set)."""
    rate_bytes = rate_bps // 8
    rate32 = min(rate_bytes, 0xFFFFFFFF)
    # struct tc_tbf_qopt: rate and peakrate (struct tc_ratespec), limit, buffer (ignored with TCA_TBF_BURST), mtu
    ratespec = struct.pack("<BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate32)
    qopt = ratespec + bytes(12) + struct.pack("<III", limit, 0, 0)
    opts = _attr(TCA_TBF_PARMS, qopt) + _attr(TCA_TBF_BURST, struct.pack("<I", burst))
    if rate_bytes > 0xFFFFFFFF:
        opts += _attr(TCA_TBF_RATE64, struct.pack("<Q", rate_bytes))
    body = struct.pack("<BxxxiIII", socket.AF_UNSPEC, ifindex, handle, parent, 0)
    body += _attr(TCA_KIND, b"tbf\0") + _attr(TCA_OPTIONS | NLA_F_NESTED, opts)
    return struct.pack("<IHHII", 16 + len(body), RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def ack_error(reply: bytes, seq: int) -> int | None:
    """The errno the kernel acknowledged ``seq`` with (0: done), or None when ``reply`` is not that ack."""
    off = 0
    while off + 16 <= len(reply):
        length, kind, _, rseq, _ = struct.unpack_from("<IHHII", reply, off)
        if kind == NLMSG_ERROR and rseq == seq:
            return -struct.unpack_from("<i", reply, off + 16)[0]
        off += (length + 3) & ~3 or len(reply)
    return None
