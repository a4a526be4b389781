"""A small rtnetlink client: qdisc and link-stats dumps, parsed with struct at fixed offsets.

Why not pyroute2: its parser is too slow for a 1 kHz sampler over ~10 namespaces; a raw RTM_GETQDISC dump
parsed at fixed offsets keeps up.

Parsers are pure functions of the dump bytes (tested on a captured dump in tests/data/telemetry/); ``RtnlSocket``
is the only part that touches the system. Layouts are from linux/netlink.h, rtnetlink.h, pkt_sched.h,
gen_stats.h and if_link.h.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from testbed.errors import TestbedError

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
RTM_NEWLINK = 16
RTM_GETLINK = 18
RTM_NEWQDISC = 36
RTM_GETQDISC = 38
RTM_NEWSTATS = 92
RTM_GETSTATS = 94

TCA_KIND = 1
TCA_XSTATS = 4
TCA_STATS2 = 7
TCA_STATS_BASIC = 1
TCA_STATS_QUEUE = 3
TCA_STATS_APP = 4
TCA_STATS_PKT64 = 8
IFLA_IFNAME = 3
IFLA_STATS_LINK_64 = 1

FIXED_SEQ = 0x7E000000  # | msg_type: the sequence number of ``RtnlSocket.dumper`` requests (dump() counts from 1)
# How much ``RtnlSocket.dumper`` asks each recv for. The kernel sizes a dump's datagrams after the largest receive
# this socket ever made (up to 32 KiB, allocated twice per qdisc dump: data, then NLMSG_DONE), but never below
# NLMSG_GOODSIZE (3776 bytes with 4 KiB pages): with 4096 each is about one page. A larger datagram (another page
# size, a namespace with many qdiscs) is seen through MSG_TRUNC, and the dumper then receives with the whole buffer.
POLL_RECV = 4096

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_IF_STATS_MSG = struct.Struct("=BxxxII")  # family, ifindex, filter_mask (linux/if_link.h struct if_stats_msg)
_TC_KEY = struct.Struct("=4xiI")  # tcmsg ifindex, handle
_RTA = struct.Struct("=HH")
_BASIC = struct.Struct("=QI")  # struct gnet_stats_basic: bytes, packets (u32; TCA_STATS_PKT64 carries u64)
_QUEUE = struct.Struct("=IIIII")  # struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits
_U64 = struct.Struct("=Q")
_RED_XSTATS = struct.Struct("=IIII")  # struct tc_red_xstats: early, pdrop, other, marked
_LINK64 = struct.Struct("=8Q")  # rtnl_link_stats64 head: rx_pkts, tx_pkts, rx_bytes, tx_bytes, rx_err, tx_err,
#                                 rx_dropped, tx_dropped


class NetlinkError(TestbedError, OSError):
    """The kernel answered a request with an error (errno), or a dump was malformed."""


@dataclass(frozen=True, slots=True)
class QdiscStats:
    ifindex: int
    handle: int
    parent: int
    kind: str
    bytes: int
    packets: int
    qlen: int
    backlog: int
    drops: int
    requeues: int
    overlimits: int
    marks: int | None  # RED's tc_red_xstats.marked; None for kinds that do not mark


@dataclass(frozen=True, slots=True)
class LinkStats:
    ifindex: int
    rx_packets: int
    tx_packets: int
    rx_bytes: int
    tx_bytes: int
    tx_dropped: int


def parse_handle(text: str) -> int:
    """``"10:"`` -> 0x000A0000, ``"1:1"`` -> 0x00010001 (tc's hex major:minor notation)."""
    major, sep, minor = text.strip().partition(":")
    if not sep or not major:
        raise ValueError(f"not a tc handle (expected MAJOR: or MAJOR:MINOR in hex): {text!r}")
    return (int(major, 16) << 16) | (int(minor, 16) if minor else 0)


def format_handle(handle: int) -> str:
    return f"{handle >> 16:x}:" + (f"{handle & 0xFFFF:x}" if handle & 0xFFFF else "")


def dump_request(msg_type: int, seq: int) -> bytes:
    """A dump request for RTM_GETQDISC (tcmsg body), RTM_GETLINK (ifinfomsg) or RTM_GETSTATS (if_stats_msg)."""
    if msg_type == RTM_GETQDISC:
        body = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    elif msg_type == RTM_GETLINK:
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    elif msg_type == RTM_GETSTATS:
        body = _IF_STATS_MSG.pack(socket.AF_UNSPEC, 0, 1 << (IFLA_STATS_LINK_64 - 1))
    else:
        raise ValueError(f"no dump request for message type {msg_type}")
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def iter_messages(buf: bytes | memoryview) -> list[tuple[int, int, int]]:
    """Split a receive buffer into (type, offset of body, end) triples; raises NetlinkError on NLMSG_ERROR."""
    out: list[tuple[int, int, int]] = []
    pos, n = 0, len(buf)
    unpack = _NLMSGHDR.unpack_from
    while pos + 16 <= n:
        length, mtype, _flags, _seq, _pid = unpack(buf, pos)
        if length < 16 or pos + length > n:
            raise NetlinkError(f"truncated netlink message at offset {pos} (len {length}, buffer {n})")
        if mtype == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", buf, pos + 16)
            if err:
                raise NetlinkError(-err, f"netlink request failed: {os.strerror(-err)}")
        else:
            out.append((mtype, pos + 16, pos + length))
        pos += (length + 3) & ~3
    return out


def _attrs(buf: bytes | memoryview, pos: int, end: int) -> dict[int, tuple[int, int]]:
    """rtattr type (flags masked) -> (payload offset, payload end) for one attribute level."""
    out: dict[int, tuple[int, int]] = {}
    unpack = _RTA.unpack_from
    while pos + 4 <= end:
        alen, atype = unpack(buf, pos)
        if alen < 4:
            break
        out[atype & 0x3FFF] = (pos + 4, pos + alen)
        pos += (alen + 3) & ~3
    return out


def parse_qdisc(buf: bytes | memoryview, body: int, end: int) -> QdiscStats:
    """One RTM_NEWQDISC message body -> QdiscStats (needs TCA_STATS2 with BASIC and QUEUE)."""
    _fam, ifindex, handle, parent, _info = _TCMSG.unpack_from(buf, body)
    attrs = _attrs(buf, body + _TCMSG.size, end)
    k = attrs.get(TCA_KIND)
    kind = bytes(buf[k[0] : k[1]]).rstrip(b"\0").decode() if k else ""
    s2 = attrs.get(TCA_STATS2)
    if s2 is None:
        raise NetlinkError(f"qdisc {format_handle(handle)} on ifindex {ifindex} has no TCA_STATS2")
    st = _attrs(buf, s2[0], s2[1])
    nbytes, npkts = _BASIC.unpack_from(buf, st[TCA_STATS_BASIC][0])
    if TCA_STATS_PKT64 in st:
        (npkts,) = _U64.unpack_from(buf, st[TCA_STATS_PKT64][0])
    qlen, backlog, drops, requeues, overlimits = _QUEUE.unpack_from(buf, st[TCA_STATS_QUEUE][0])
    marks: int | None = None
    if kind == "red":
        app = st.get(TCA_STATS_APP) or attrs.get(TCA_XSTATS)
        if app is not None and app[1] - app[0] >= _RED_XSTATS.size:
            marks = _RED_XSTATS.unpack_from(buf, app[0])[3]
    return QdiscStats(ifindex, handle, parent, kind, nbytes, npkts, qlen, backlog, drops, requeues, overlimits, marks)


def parse_qdisc_dump(
    buf: bytes | memoryview, wanted: set[tuple[int, int]] | None = None
) -> dict[tuple[int, int], QdiscStats]:
    """All RTM_NEWQDISC messages in ``buf`` -> {(ifindex, handle): stats}, only ``wanted`` keys when given.

    The ifindex/handle check reads the tcmsg at a fixed offset before any attribute is parsed, so unwanted
    qdiscs (noqueue on lo, the far veth ends) cost a single unpack.
    """
    out: dict[tuple[int, int], QdiscStats] = {}
    key_of = _TC_KEY.unpack_from
    for mtype, body, end in iter_messages(buf):
        if mtype != RTM_NEWQDISC:
            continue
        key = key_of(buf, body)
        if wanted is None or key in wanted:
            out[key] = parse_qdisc(buf, body, end)
    return out


def parse_link_names(buf: bytes | memoryview) -> dict[int, str]:
    """RTM_NEWLINK messages -> {ifindex: name}."""
    out: dict[int, str] = {}
    for mtype, body, end in iter_messages(buf):
        if mtype != RTM_NEWLINK:
            continue
        _fam, _type, index, _flags, _change = _IFINFOMSG.unpack_from(buf, body)
        a = _attrs(buf, body + _IFINFOMSG.size, end).get(IFLA_IFNAME)
        if a:
            out[index] = bytes(buf[a[0] : a[1]]).rstrip(b"\0").decode()
    return out


def parse_stats_dump(buf: bytes | memoryview) -> dict[int, LinkStats]:
    """RTM_NEWSTATS messages (filter IFLA_STATS_LINK_64) -> {ifindex: LinkStats}."""
    out: dict[int, LinkStats] = {}
    for mtype, body, end in iter_messages(buf):
        if mtype != RTM_NEWSTATS:
            continue
        _fam, ifindex, _mask = _IF_STATS_MSG.unpack_from(buf, body)
        a = _attrs(buf, body + _IF_STATS_MSG.size, end).get(IFLA_STATS_LINK_64)
        if a is None:
            continue
        rxp, txp, rxb, txb, _rxe, _txe, _rxd, txd = _LINK64.unpack_from(buf, a[0])
        out[ifindex] = LinkStats(ifindex, rxp, txp, rxb, txb, txd)
    return out


class RtnlSocket:
    """A NETLINK_ROUTE socket bound to the network namespace it was created in (see ``netns.socket_in``)."""

    def __init__(self, sock: socket.socket, bufsize: int = 1 << 20):
        self.sock = sock
        self.seq = 0
        self._buf = bytearray(bufsize)
        self._view = memoryview(self._buf)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, bufsize)
        sock.bind((0, 0))

    @classmethod
    def create(cls) -> RtnlSocket:
        return cls(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE))

    def dump(self, msg_type: int) -> bytes:
        """Send one dump request and return every reply byte up to (not including) NLMSG_DONE.

        A qdisc dump costs three syscalls here: the kernel sends NLMSG_DONE as its own datagram after the data (a
        stats dump puts it at the end of the data). The end is found from the last 20 bytes of a datagram
        (NLMSG_DONE with our seq), or an NLMSG_ERROR reply, so the messages are not walked here.
        """
        self.seq = seq = (self.seq + 1) & 0xFFFFFFFF
        self.sock.send(dump_request(msg_type, seq))
        return self._collect(seq)

    def dumper(self, msg_type: int, recv_size: int = POLL_RECV) -> Callable[[], bytes]:
        """``dump(msg_type)`` for a polling loop: the request is built once, with the fixed sequence number
        ``FIXED_SEQ | msg_type``, so that two dumps of unchanged counters are equal bytes (the sampler skips those
        without reading them); the usual reply (one data datagram, NLMSG_DONE at its end or alone after it) is
        taken without a list or a join; each recv asks for ``recv_size`` bytes (``POLL_RECV``: keep every other
        receive on this socket as small, or use another socket for them)."""
        seq = FIXED_SEQ | msg_type
        req = dump_request(msg_type, seq)
        send, recv_into, buf, view = self.sock.send, self.sock.recv_into, self._buf, self._view
        unpack = _NLMSGHDR.unpack_from
        size = [min(recv_size, len(buf))]
        trunc = socket.MSG_TRUNC

        def dump() -> bytes:
            nbytes = size[0]
            send(req)
            n = recv_into(buf, nbytes, trunc)  # MSG_TRUNC: the datagram's own length, even if it did not fit
            if n > nbytes:
                return self._retry(seq, size, req)
            if n < 20 or unpack(view, 0)[1] == NLMSG_ERROR:
                return self._collect(seq, n)
            length, mtype, _fl, mseq, _pid = unpack(view, n - 20)
            if mtype == NLMSG_DONE and length == 20 and mseq == seq:  # data and DONE in one datagram
                return bytes(view[: n - 20])
            data = bytes(view[:n])
            m = recv_into(buf, nbytes, trunc)  # usually DONE alone
            if m > nbytes:
                return self._retry(seq, size, req)
            if m == 20:
                length, mtype, _fl, mseq, _pid = unpack(view, 0)
                if mtype == NLMSG_DONE and length == 20 and mseq == seq:
                    return data
            return data + self._collect(seq, m)

        return dump

    def _retry(self, seq: int, size: list[int], req: bytes) -> bytes:
        """A datagram did not fit ``size[0]``: drop the rest of that dump, receive with the whole buffer from now on,
        and dump again. The rest is read without waiting: the kernel queues a dump's next datagram (or its DONE)
        before the recv that took the previous one returns, so an empty queue means that dump is over."""
        while True:
            try:
                self.sock.recv_into(self._buf, len(self._buf), socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
        size[0] = len(self._buf)
        self.sock.send(req)
        return self._collect(seq)

    def _collect(self, seq: int, n: int = -1) -> bytes:
        """The reply datagrams of the dump with ``seq`` (the first one already in the buffer, ``n`` bytes, unless
        -1) up to NLMSG_DONE or an NLMSG_ERROR reply."""
        chunks: list[bytes] = []
        view = self._view
        while True:
            if n < 0:
                n = self.sock.recv_into(self._buf)
            if n < 16:
                raise NetlinkError(f"short netlink datagram ({n} bytes)")
            if n >= 20:
                length, mtype, _fl, mseq, _pid = _NLMSGHDR.unpack_from(view, n - 20)
                if mtype == NLMSG_DONE and length == 20 and mseq == seq:
                    if n > 20:
                        chunks.append(bytes(view[: n - 20]))
                    break
            chunks.append(bytes(view[:n]))
            if _NLMSGHDR.unpack_from(view, 0)[1] == NLMSG_ERROR:  # the parser raises it with its errno
                break
            n = -1
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # b"" for an empty dump

    def close(self) -> None:
        self.sock.close()
